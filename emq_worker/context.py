"""The context a handler receives: which job it is running, under which fencing token."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from emq_worker.protocol import JobId, Token


@dataclass(frozen=True, slots=True)
class JobContext:
    queue: str
    job_id: JobId
    token: Token
    """The attempts value this claim got: 1 on the first run, 2 on the first retry, ..."""
    task: str
    payload: bytes
    """The raw payload as it is on the wire (for raw handlers; task handlers get kwargs)."""
    log: structlog.typing.FilteringBoundLogger

    @property
    def attempt(self) -> int:
        return int(self.token)
