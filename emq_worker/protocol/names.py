"""Names and constants of the EchoMQ wire protocol (flat queues) as emq-worker speaks it."""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NewType

DEFAULT_WIRE_VERSION: Final = "echomq:3.0.0"
"""What `{emq}:version` must hold; configurable because the fence only ever climbs."""

JOB_NAMESPACE: Final = "JOB"

JobId = NewType("JobId", str)
Token = NewType("Token", int)
"""The fencing token: the row's `attempts` after the claim's HINCRBY."""


class JobState(StrEnum):
    PENDING = "pending"
    ACTIVE = "active"
    SCHEDULED = "scheduled"
    DEAD = "dead"


class Field(StrEnum):
    """Fields of the job row `emq:{q}:job:<id>`."""

    STATE = "state"
    ATTEMPTS = "attempts"
    PAYLOAD = "payload"
    LAST_ERROR = "last_error"
    ATTEMPTS_BASE = "attempts_base"
    LAST_TRACEBACK = "last_traceback"
    """The last failed attempt's formatted traceback (its last 8 KB); EchoMQ ignores it."""
    ERROR_HISTORY = "error_history"
    """JSON array of the last 5 failed attempts' {attempt, at_ms, error}; kept by dead retry."""
