"""Text rendering for the operator CLI: tables, stats, one job's inspection, the dead list.

Pure functions from the admin verbs' results to printable text; every value that came from Redis
goes through `escape`, so a payload cannot drive the terminal.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from emq_worker.admin.dead_letter import DeadJob
from emq_worker.admin.flow_inspect import flow_lines
from emq_worker.admin.lookup import CompletedJob
from emq_worker.admin.verbs import COUNT_FIELDS, PAYLOAD_SHOWN, Discovery, Inspection, QueueStats
from emq_worker.protocol.lane_verbs import LANES_SCAN, LanesView
from emq_worker.protocol.names import Field
from emq_worker.valkey.scan import SCAN_COUNT

ERROR_SHOWN = 200
"""Characters of a last_error `dead list` shows in its table (JSON has all of it)."""


def escape(value: str) -> str:
    """Printable text: control and other non-printable characters become \\x / \\u escapes, so
    a payload cannot drive the terminal."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in value)


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def render_stats(stats: Sequence[QueueStats], discovery: Discovery | None) -> str:
    rows = [
        [s.queue, "yes" if s.paused else "no", *(getattr(s.counts, f) for f in COUNT_FIELDS)]
        for s in stats
        if not s.error
    ]
    lines = [table(["queue", "paused", *COUNT_FIELDS], rows)] if rows else []
    lines += [f"{s.queue}: cannot read its counts: {s.error}" for s in stats if s.error]
    lines += [lanes_summary(s.queue, s.lanes) for s in stats if s.lanes.groups]
    lines = lines or ["no queues found"]
    if discovery is not None and not discovery.complete:
        lines.append(
            f"(queue scan cut short after {discovery.scan_calls} SCAN calls of COUNT "
            f"{SCAN_COUNT}; there may be more queues: name them with --queue)"
        )
    return "\n".join(lines)


def render_lanes(queue: str, view: LanesView) -> str:
    """A queue's deepest lanes as a table, then the totals."""
    if not view.groups:
        return f"queue {queue!r} has no lanes (no job was enqueued with a group)"
    rows = [
        [
            escape(lane.group),
            lane.waiting,
            lane.active,
            lane.limit or "-",
            "yes" if lane.paused else "no",
        ]
        for lane in view.deepest
    ]
    lines = [table(["group", "waiting", "active", "limit", "paused"], rows)]
    lines.append(lanes_summary(queue, view))
    return "\n".join(lines)


def lanes_summary(queue: str, view: LanesView) -> str:
    """One line: how many lanes, how many serviceable, how many jobs wait in them."""
    more = "" if view.complete else f" (the first {LANES_SCAN} names of each key read)"
    return (
        f"{queue}: {view.groups} lanes{more}, {view.serviceable} in rotation, "
        f"{view.waiting} jobs waiting in lanes"
    )


def _when(ms: int, now_ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    delta = (ms - now_ms) / 1000
    return f"{stamp} ({'in ' if delta >= 0 else ''}{abs(delta):.1f} s{' ago' if delta < 0 else ''})"


FAILURE_FIELDS = (Field.ERROR_HISTORY, Field.LAST_TRACEBACK)
"""Row fields `inspect` shows as blocks of their own after the table, not as one line."""


def error_history(value: str) -> list[dict[str, object]]:
    """The row's error_history, or [] when it does not decode (never an error: a diagnostic)."""
    try:
        history = json.loads(value)
    except ValueError:
        return []
    return [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []


def _failure_blocks(job: Inspection) -> list[str]:
    blocks = []
    history = error_history(job.row.get(Field.ERROR_HISTORY, ""))
    if history:
        blocks.append("errors (the last attempts, oldest first):")
        for entry in history:
            at = entry.get("at_ms")
            when = _when(at, job.server_now_ms) if isinstance(at, int) else "?"
            error = escape(str(entry.get("error", "")))
            blocks.append(f"  attempt {entry.get('attempt', '?')} at {when}: {error}")
    trace = job.row.get(Field.LAST_TRACEBACK)
    if trace:
        blocks.append("traceback (the last failed attempt):")
        blocks += [f"  {escape(line)}" for line in trace.rstrip("\n").split("\n")]
    return blocks


def render_inspection(job: Inspection) -> str:
    lines = [("job", job.job_id), ("queue", job.queue), ("where", job.where)]
    known = [f for f in Field if f in job.row and f not in FAILURE_FIELDS]
    fields = [*known, *sorted(set(job.row) - set(Field))]
    lines += [(name, escape(job.row[name])) for name in fields]
    if job.lease_deadline_ms is not None:
        lines.append(("lease", "deadline " + _when(job.lease_deadline_ms, job.server_now_ms)))
    if job.lock_value is not None:
        ttl = "no TTL" if job.lock_ttl_ms is None else f"ttl {job.lock_ttl_ms / 1000:.1f} s"
        lines.append(("lock", f"{escape(job.lock_value)} ({ttl})"))
    if job.scheduled_at_ms is not None:
        lines.append(("scheduled", _when(job.scheduled_at_ms, job.server_now_ms)))
    if job.flow is not None:
        lines += [(name, escape(value)) for name, value in flow_lines(job.flow)]
    shown = escape(job.payload[:PAYLOAD_SHOWN])
    if len(job.payload) > PAYLOAD_SHOWN:
        shown += f" ... ({job.payload_bytes} bytes in all)"
    lines.append(("payload", shown))
    width = max(len(name) for name, _ in lines)
    table_lines = [f"{name.ljust(width)}  {value}" for name, value in lines]
    return "\n".join([*table_lines, *_failure_blocks(job)])


def render_completed(job: CompletedJob) -> str:
    expires = (
        "no expiry" if job.expires_in_ms is None else f"expires in {job.expires_in_ms / 1000:.1f} s"
    )
    shown = job.error or json.dumps(job.value, ensure_ascii=False)
    lines = [
        ("job", job.job_id),
        ("queue", job.queue),
        ("where", "completed (result stored)"),
        ("result", f"{escape(shown[:PAYLOAD_SHOWN])} ({expires})"),
    ]
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in lines)


def render_dead(queue: str, total: int, jobs: Sequence[DeadJob]) -> str:
    if not jobs:
        return f"no dead jobs in queue {queue!r}"
    rows = [[j.id, j.attempts, escape(j.last_error[:ERROR_SHOWN])] for j in jobs]
    more = f" (showing the first {len(jobs)})" if len(jobs) < total else ""
    return f"{total} dead in queue {queue!r}{more}\n" + table(
        ["id", "attempts", "last_error"], rows
    )
