"""The context a handler receives: which job it is running, under which fencing token."""

from __future__ import annotations

import structlog

from emq_worker.log import get_logger
from emq_worker.protocol import JobId, Token


class JobContext:
    """Read-only facts about the running job, and a logger bound to them (made on first use,
    so a job that never logs pays nothing for it)."""

    __slots__ = ("_log", "job_id", "payload", "queue", "task", "token")

    def __init__(self, queue: str, job_id: JobId, token: Token, task: str, payload: bytes) -> None:
        self.queue = queue
        self.job_id = job_id
        self.token = token
        """The attempts value this claim got: 1 on the first run, 2 on the first retry, ..."""
        self.task = task
        self.payload = payload
        """The raw payload as it is on the wire (for raw handlers; task handlers get kwargs)."""
        self._log: structlog.typing.FilteringBoundLogger | None = None

    @property
    def attempt(self) -> int:
        return int(self.token)

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger:
        if self._log is None:
            self._log = get_logger(
                queue=self.queue, job_id=self.job_id, attempts=self.token, task=self.task
            )
        return self._log
