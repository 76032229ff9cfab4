"""What the pages show, read from the keyspace through the admin verbs (no writes here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emq_worker.admin import dead_letter, render, verbs
from emq_worker.dashboard.attempts import holder_of
from emq_worker.dashboard.fleet import Holder
from emq_worker.dashboard.job_result import StoredResult, stored_result
from emq_worker.dashboard.listing import preview
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.values import Counts

LOG_LINES_SHOWN = 200
"""The newest lines of a job's log a page shows."""
ROW_FIELDS_APART = ("progress", "last_error", "last_traceback", "error_history")
"""Row fields a job page shows on their own, not in the table of fields."""


class GoneJobError(verbs.UnknownJobError):
    """The job's row is gone, but the settled log remembers how it ended."""

    def __init__(
        self,
        cause: verbs.UnknownJobError,
        settled: list[dict[str, Any]],
        result: StoredResult | None,
    ) -> None:
        verbs.AdminError.__init__(self, str(cause))
        self.cause = cause
        self.settled = settled
        self.result = result
        """Its return value, while the result is kept (a completed job's row is deleted)."""


@dataclass(frozen=True, slots=True)
class JobView:
    inspection: verbs.Inspection
    attempt: int
    task: str
    holder: Holder | None
    """Who holds it now (an active job whose holder's entry lists it)."""
    progress: str | None
    progress_percent: float | None
    last_error: str | None
    last_traceback: str | None
    error_history: list[dict[str, object]]
    fields: list[tuple[str, str]]
    logs: list[str]
    log_lines: int
    payload: str
    payload_truncated: bool
    result: StoredResult | None
    """A return value kept under its id (a job re-enqueued under a chosen id after it ran)."""

    def as_dict(self) -> dict[str, Any]:
        holder = self.holder
        return {
            **self.inspection.as_dict(),
            "task": self.task,
            "holder": None if holder is None else holder.worker,
            "claimed_ms": None if holder is None else holder.claimed_ms,
            "progress": self.progress,
            "last_error": self.last_error,
            "last_traceback": self.last_traceback,
            "error_history": self.error_history,
            "logs": self.logs,
            "log_lines": self.log_lines,
            "result": None if self.result is None else self.result.as_dict(),
        }


async def job_view(queue: Queue, job_id: JobId) -> JobView:
    job = await verbs.inspect_job(queue, job_id)
    logs_key = queue.keys.logs(job_id)
    if await queue.client.type(logs_key) in (b"list", "list"):
        lines = await queue.client.llen(logs_key)
        logs = [_line(v) for v in await queue.client.lrange(logs_key, -LOG_LINES_SHOWN, -1)]
    else:
        lines, logs = 0, []
    shown = job.payload[: verbs.PAYLOAD_SHOWN]
    attempt = int(job.row.get("attempts", "0") or 0) if job.row.get("attempts", "").isdigit() else 0
    holder = None
    if job.where == "active":
        holder = await holder_of(queue.client, queue.name, job_id, attempt)
    return JobView(
        inspection=job,
        attempt=attempt,
        task=preview(job.payload)[0],
        holder=holder,
        progress=job.row.get("progress"),
        progress_percent=percent(job.row.get("progress")),
        last_error=job.row.get("last_error"),
        last_traceback=job.row.get("last_traceback"),
        error_history=render.error_history(job.row.get("error_history", "")),
        fields=[(k, v) for k, v in job.row.items() if k not in ROW_FIELDS_APART],
        logs=logs,
        log_lines=int(lines),
        payload=shown,
        payload_truncated=len(shown) < len(job.payload),
        result=await stored_result(queue.client, queue.name, job_id),
    )


def percent(progress: str | None) -> float | None:
    """The progress as a percentage when it is a bare number from 0 to 100 (a handler's
    `ctx.progress(40)`), else None: an object is shown as its JSON text only."""
    try:
        value = float(progress) if progress is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value <= 100 else None


def _line(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else text(value)


@dataclass(frozen=True, slots=True)
class DeadView:
    counts: Counts
    paused: bool
    jobs: list[dead_letter.DeadJob]


async def dead_view(queue: Queue, limit: int) -> DeadView:
    stats = await verbs.queue_stats(queue)
    return DeadView(stats.counts, stats.paused, await dead_letter.list_dead(queue, limit))
