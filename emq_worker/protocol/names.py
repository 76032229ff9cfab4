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
    AWAITING_CHILDREN = "awaiting_children"
    """A flow parent held out of every set until its children are done (docs/protocol.md, 5b)."""


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
    FENCED = "fenced"
    """The `attempts` a move to dead of ours raised the token to, fencing its last holder out
    (docs/protocol.md, section 6); while `attempts` still equals it, one attempt less ran."""
    PARENT = "parent"
    """A flow child's parent id (the parent waits in `parent_queue`, else in this queue)."""
    PARENT_QUEUE = "parent_queue"
    PARENT_POLICY = "parent_policy"
    """`fp`: the child's death fails its parent; `id`: its death counts as done."""


def attempts_run(attempts: bytes | str | None, fenced: bytes | str | None) -> int:
    """The attempts a job ran, from its row's `attempts` and `fenced`: one less than `attempts`
    while the raise of a dead-lettering (its `fenced`) is the last change to it."""
    count = int(attempts or 0)
    if fenced is not None and str(count) == (
        fenced.decode() if isinstance(fenced, bytes) else fenced
    ):
        return count - 1
    return count
