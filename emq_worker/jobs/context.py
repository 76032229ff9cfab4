"""The context a handler receives: which job it is running, under which fencing token, and the
fenced writes it may make about itself (progress, job log lines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
from redis.asyncio import Redis

from emq_worker.errors import ConfigError, FencedError
from emq_worker.jobs import tracing
from emq_worker.jobs.children import children_failures, children_results
from emq_worker.jobs.writes import LOG_KEEP, append_log, report_progress
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.values import HeldLease


@dataclass(frozen=True, slots=True)
class JobServices:
    """What a running job may use beyond its own facts: the queue its fenced writes go to
    (progress, job log, children's results) and the handlers' client (`ctx.redis`)."""

    writer: Queue | None = None
    redis: Any = None


NO_SERVICES = JobServices()


class JobContext:
    """Read-only facts about the running job, a logger bound to them (made on first use, so a
    job that never logs pays nothing for it), `progress` / `append_log`, and `redis`, the
    worker's client for the handler's own calls."""

    __slots__ = (
        "_log",
        "_services",
        "job_id",
        "nonce",
        "payload",
        "queue",
        "span",
        "task",
        "token",
    )

    def __init__(self, job: ClaimedJob, task: str, services: JobServices = NO_SERVICES) -> None:
        self.queue = job.queue
        self.job_id = job.id
        self.token = job.token
        """The attempts value this claim got: 1 on the first run, 2 on the first retry, ..."""
        self.task = task
        self.payload = job.payload
        """The raw payload as it is on the wire (for raw handlers; task handlers get kwargs)."""
        self.nonce = job.nonce
        """The claim's nonce: with the token, what proves this run still owns the job."""
        self.span: Any = None
        """The attempt's OpenTelemetry span while tracing is on (the `otel` extra and a tracer
        provider), else None: current while the handler runs, unless the handler opens its own."""
        self._services = services
        self._log: structlog.typing.FilteringBoundLogger | None = None

    @property
    def redis(self) -> Redis:
        """The worker's client for the handler's own Valkey calls (`await ctx.redis.incr(k)`):
        the commands concurrent handlers send in one turn of the event loop go out together on
        a few shared connections (docs/guide/jobs.md). Bytes in, bytes out. Not available in a
        process-pool task (`executor="process"`)."""
        if self._services.redis is None:
            raise ConfigError(f"job {self.job_id}: this context has no client (a pool process)")
        client: Redis = self._services.redis
        return client

    @property
    def attempt(self) -> int:
        return int(self.token)

    @property
    def fencing_token(self) -> int:
        """The number your own store checks to refuse a superseded holder's late write: it only
        climbs for this job across its attempts (reaps, retries, hand-backs, reprocess, EchoMQ's
        claims), so keep the highest one seen per job id and refuse a lower one
        (docs/how-to/fencing.md). It is the claim's `attempts` value; a caller-chosen id enqueued
        again after its row is gone starts a new job, and its count starts again at 1."""
        return int(self.token)

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger:
        """A structlog logger bound to the job (the worker's own log, not the job log)."""
        if self._log is None:
            self._log = structlog.get_logger("emq_worker").bind(
                queue=self.queue, job_id=self.job_id, attempts=self.token, task=self.task
            )
        return self._log

    async def progress(self, value: int | float | dict[str, object]) -> None:
        """Record the job's progress (a number, or a small JSON object) in the row's `progress`
        field and publish a `progress` event on `emq:{q}:events` (at most once; nobody listening
        is fine).

        Raises FencedError when this run no longer owns the job (its lease was lost), and
        ConfigError for a value JSON cannot hold.
        """
        try:
            await report_progress(self._writer(), self._held(), value)
        except FencedError as exc:
            self.log.warning("progress_fenced", status=exc.status, current=exc.detail)
            tracing.fenced(self.span, self.job_id, self.token, "progress", exc.detail, exc.status)
            raise

    async def append_log(self, line: str, *, keep: int | None = None) -> int:
        """Append `line` to the job log (`job:<id>:logs`, read by `emq-worker logs`), keeping
        the last `keep` lines (default 1000); returns how many lines it keeps now. The log is
        deleted with the job (on completion or removal); a dead job keeps it.

        Raises FencedError when this run no longer owns the job (its lease was lost).
        """
        try:
            return await append_log(self._writer(), self._held(), line, keep or LOG_KEEP)
        except FencedError as exc:
            self.log.warning("job_log_fenced", status=exc.status, current=exc.detail)
            tracing.fenced(self.span, self.job_id, self.token, "log", exc.detail, exc.status)
            raise

    async def children_results(self) -> dict[JobId, Any]:
        """For a flow parent: each completed child's id and the value its handler returned
        (decoded JSON; bytes as recorded for a child an EchoMQ consumer or a raw handler
        completed: EchoMQ records the child's own id when it completes without a result)."""
        return await children_results(self._writer(), self.job_id)

    async def children_failures(self) -> dict[JobId, str]:
        """For a flow parent: each child that died under `on_failure="ignore"` (counted as
        done) and its last error."""
        return await children_failures(self._writer(), self.job_id)

    def _writer(self) -> Queue:
        if self._services.writer is None:
            raise ConfigError(f"job {self.job_id}: this context was built without a queue to write")
        return self._services.writer

    def _held(self) -> HeldLease:
        return HeldLease(self.job_id, self.token, self.nonce)
