"""What the pages show, read from the keyspace through the admin verbs (no writes here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from emq_worker.admin import dead, render, verbs
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Counts

LOG_LINES_SHOWN = 200
"""The newest lines of a job's log a page shows."""
ROW_FIELDS_APART = ("progress", "last_error", "last_traceback", "error_history")
"""Row fields a job page shows on their own, not in the table of fields."""


@dataclass(frozen=True, slots=True)
class Overview:
    queues: list[verbs.QueueStats]
    complete: bool
    """False when discovery stopped at its SCAN budget: there may be more queues."""

    def as_dict(self) -> dict[str, Any]:
        return {"queues": [q.as_dict() for q in self.queues], "complete": self.complete}


async def overview(client: Redis, scripts: Scripts) -> Overview:
    rows, found = await verbs.stats(client, scripts, ())
    return Overview(rows, found is None or found.complete)


@dataclass(frozen=True, slots=True)
class JobView:
    inspection: verbs.Inspection
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

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.inspection.as_dict(),
            "progress": self.progress,
            "last_error": self.last_error,
            "last_traceback": self.last_traceback,
            "error_history": self.error_history,
            "logs": self.logs,
            "log_lines": self.log_lines,
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
    return JobView(
        inspection=job,
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
    jobs: list[dead.DeadJob]


async def dead_view(queue: Queue, limit: int) -> DeadView:
    stats = await verbs.queue_stats(queue)
    return DeadView(stats.counts, stats.paused, await dead.list_dead(queue, limit))
