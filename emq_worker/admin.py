"""Operator verbs: stats, inspect, dead-letter handling, pause/resume, remove.

Small async functions over a client, composed from the queue verbs; the CLI parses options, calls
one of these and prints what it returns (`render_*` below). Nothing here reads the environment.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker.errors import EmqError, LockedError, StateError
from emq_worker.jobwrites import read_log
from emq_worker.keys import QueueKeys, validate_queue_name
from emq_worker.outcomes import text
from emq_worker.protocol import Field, JobId, JobState
from emq_worker.queue import Counts, Queue
from emq_worker.scan import SCAN_BUDGET, SCAN_COUNT, BoundedScan
from emq_worker.scripts import Scripts

DEAD_PAGE = 1000
PAYLOAD_SHOWN = 2000
"""Characters of a payload `inspect` shows; the rest is summarised."""
ERROR_SHOWN = 200
"""Characters of a last_error `dead list` shows in its table (JSON has all of it)."""
COUNT_FIELDS = ("pending", "active", "scheduled", "dead", "completed", "failed")


class AdminError(EmqError):
    """An admin verb cannot do what was asked; the message names the queue and job."""


class UnknownQueueError(AdminError, LookupError):
    def __init__(self, queue: str, *, certain: bool = True) -> None:
        prefix = QueueKeys.of(queue).prefix
        where = f"no keys under {prefix}" if certain else f"none of its sets under {prefix}"
        super().__init__(f"no such queue {queue!r} ({where})")


class UnknownJobError(AdminError, LookupError):
    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(f"no job {job_id} in queue {queue!r}")


class JobHeldError(AdminError):
    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(
            f"job {job_id} in queue {queue!r} is held by a worker (EMQLOCK); "
            "retry once it settles or its lease lapses"
        )


# --- queues -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Discovery:
    queues: tuple[str, ...]
    complete: bool
    """False when the scan stopped at its budget: there may be more queues."""
    scan_calls: int


def queue_of_key(key: bytes | str) -> str | None:
    """The queue `q` of a key `emq:{q}:...`, or None for any other key."""
    name = text(key)
    end = name.find("}:", 5)
    if not name.startswith("emq:{") or end < 0:
        return None
    try:
        return validate_queue_name(name[5:end])
    except EmqError:
        return None


async def discover_queues(
    client: Redis, *, budget: int = SCAN_BUDGET, count: int = SCAN_COUNT
) -> Discovery:
    """Queue names found by a bounded `SCAN MATCH emq:{*}:*`, sorted and de-duplicated."""
    found: set[str] = set()
    scan = BoundedScan(client, "emq:{*}:*", budget=budget, count=count)
    async for keys in scan.pages():
        found.update(q for q in map(queue_of_key, keys) if q is not None)
    return Discovery(tuple(sorted(found)), scan.complete, scan.calls)


async def open_queue(client: Redis, scripts: Scripts, name: str) -> Queue:
    """The queue `name`, or UnknownQueueError when it has no keys (QueueNameError when the name
    is illegal, before any key is built)."""
    queue = Queue(client, scripts, name)
    k = queue.keys
    if await client.exists(k.pending, k.active, k.schedule, k.dead, k.meta, k.completed, k.failed):
        return queue
    # Only job rows left (state "unknown")? Look for any key under the prefix, within a budget.
    scan = BoundedScan(client, k.prefix + "*")
    async for keys in scan.pages():
        if keys:
            return queue
    raise UnknownQueueError(name, certain=scan.complete)


# --- stats --------------------------------------------------------------------------------


NO_COUNTS = Counts(0, 0, 0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    paused: bool
    counts: Counts
    error: str = ""
    """Why the counts could not be read (a key of the wrong type); the counts are then 0."""

    def as_dict(self) -> dict[str, Any]:
        values = {name: getattr(self.counts, name) for name in COUNT_FIELDS}
        error = {"error": self.error} if self.error else {}
        return {"queue": self.queue, "paused": self.paused, **values, **error}


async def queue_stats(queue: Queue) -> QueueStats:
    """One queue's depths and counters. A key of the wrong type (WRONGTYPE: something else wrote
    into the queue's keyspace) is reported for that queue alone; the other queues still list."""
    try:
        counts = await queue.counts()
        paused = bool(await queue.client.hexists(queue.keys.meta, "paused"))
    except ResponseError as exc:
        # redis-py wraps a pipeline's error in "Command # n (...) of pipeline caused error":
        # lead with the error's own code, which is what an operator searches for.
        reason = str(exc)
        code = next((c for c in ("WRONGTYPE", "NOPERM") if c in reason), "ERR")
        return QueueStats(queue.name, False, NO_COUNTS, error=f"{code}: {reason}")
    return QueueStats(queue.name, paused, counts)


async def stats(
    client: Redis, scripts: Scripts, names: Sequence[str]
) -> tuple[list[QueueStats], Discovery | None]:
    """Stats of the named queues (each must exist), or of every queue discovery finds."""
    if names:
        queues = [await open_queue(client, scripts, name) for name in names]
        found = None
    else:
        found = await discover_queues(client)
        queues = [Queue(client, scripts, name) for name in found.queues]
    return [await queue_stats(queue) for queue in queues], found


# --- inspect ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Inspection:
    queue: str
    job_id: JobId
    where: str
    """pending, active, scheduled, dead, or unknown (a row in none of the sets)."""
    row: dict[str, str]
    """Every field but the payload."""
    payload: str
    payload_bytes: int
    server_now_ms: int
    lease_deadline_ms: int | None = None
    lock_value: str | None = None
    lock_ttl_ms: int | None = None
    scheduled_at_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        shown = self.payload[:PAYLOAD_SHOWN]
        return {
            "queue": self.queue,
            "job_id": self.job_id,
            "where": self.where,
            "row": self.row,
            "payload": shown,
            "payload_bytes": self.payload_bytes,
            "payload_truncated": len(shown) < len(self.payload),
            "server_now_ms": self.server_now_ms,
            "lease_deadline_ms": self.lease_deadline_ms,
            "lock_value": self.lock_value,
            "lock_ttl_ms": self.lock_ttl_ms,
            "scheduled_at_ms": self.scheduled_at_ms,
        }


def _ms(score: Any) -> int | None:
    return None if score is None else int(score)


async def inspect_job(queue: Queue, job_id: JobId) -> Inspection:
    """Row, place, lease and lock of one job (a few reads, not one snapshot)."""
    row = await queue.get_job(job_id)
    if row is None:
        raise UnknownJobError(queue.name, job_id)
    where = await queue.state_of(job_id)
    k = queue.keys
    async with queue.client.pipeline(transaction=False) as pipe:
        pipe.eval("return redis.call('TIME')", 1, k.active)  # on the queue's node in a cluster
        pipe.zscore(k.active, job_id)
        pipe.zscore(k.schedule, job_id)
        pipe.get(k.lock(job_id))
        pipe.pttl(k.lock(job_id))
        pipe.hstrlen(k.job(job_id), Field.PAYLOAD)
        (sec, usec), deadline, run_at, lock, ttl, size = await pipe.execute()
    payload = row.pop(Field.PAYLOAD, "")
    return Inspection(
        queue=queue.name,
        job_id=job_id,
        where=where,
        row=row,
        payload=payload,
        payload_bytes=int(size),
        server_now_ms=int(sec) * 1000 + int(usec) // 1000,
        lease_deadline_ms=_ms(deadline),
        lock_value=None if lock is None else text(lock),
        lock_ttl_ms=int(ttl) if lock is not None and int(ttl) >= 0 else None,
        scheduled_at_ms=_ms(run_at),
    )


# --- dead ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadJob:
    id: JobId
    attempts: int
    last_error: str


async def list_dead(queue: Queue, limit: int) -> list[DeadJob]:
    """The first `limit` dead jobs in mint order (every score is 0, so lex order is mint order)."""
    ids = [JobId(text(m)) for m in await queue.client.zrange(queue.keys.dead, 0, limit - 1)]
    async with queue.client.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hmget(queue.keys.job(job_id), Field.ATTEMPTS, Field.LAST_ERROR)
        rows = await pipe.execute()
    return [
        DeadJob(job_id, int(attempts or 0), "" if error is None else text(error))
        for job_id, (attempts, error) in zip(ids, rows, strict=True)
    ]


async def dead_pages(queue: Queue, page: int = DEAD_PAGE) -> AsyncIterator[list[JobId]]:
    """Every dead id once, in pages by lex order, each page after the last id seen: a job that
    dies again while this runs is not visited twice."""
    after = "-"
    while True:
        members = await queue.client.zrangebylex(queue.keys.dead, after, "+", 0, page)
        if not members:
            return
        ids = [JobId(text(m)) for m in members]
        yield ids
        after = "(" + ids[-1]


@dataclass(slots=True)
class BulkResult:
    done: int = 0
    skipped: list[tuple[JobId, str]] = field(default_factory=list)
    """(job id, why) for each named job left alone."""


async def _retry_one(queue: Queue, job_id: JobId, result: BulkResult) -> None:
    try:
        if await queue.reprocess(job_id):
            result.done += 1
        else:
            result.skipped.append((job_id, "absent"))
    except StateError:
        result.skipped.append((job_id, f"not dead ({await queue.state_of(job_id)})"))


async def _purge_one(queue: Queue, job_id: JobId, result: BulkResult) -> None:
    where = await queue.state_of(job_id)
    if where != JobState.DEAD:
        result.skipped.append((job_id, "absent" if where == "absent" else f"not dead ({where})"))
        return
    try:
        if await queue.remove(job_id, only_dead=True):
            result.done += 1
        else:
            result.skipped.append((job_id, "absent"))
    except LockedError:
        result.skipped.append((job_id, "held by a worker (EMQLOCK)"))
    except StateError:  # reprocessed between the look and the purge: leave it be
        result.skipped.append((job_id, "not dead any more"))


async def retry_dead(queue: Queue, ids: Sequence[JobId] | None) -> BulkResult:
    """Reprocess the named dead jobs, or every dead job when `ids` is None."""
    result = BulkResult()
    if ids is not None:
        for job_id in ids:
            await _retry_one(queue, job_id, result)
        return result
    async for page in dead_pages(queue):
        for job_id in page:
            await _retry_one(queue, job_id, result)
    result.skipped.clear()  # with --all, a job reprocessed by someone else is not news
    return result


async def purge_dead(queue: Queue, ids: Sequence[JobId] | None) -> BulkResult:
    """Delete the named dead jobs (row, subkeys, set member), or every dead job when `ids` is
    None, each through the remove script (which refuses a held job)."""
    result = BulkResult()
    if ids is not None:
        for job_id in ids:
            await _purge_one(queue, job_id, result)
        return result
    async for page in dead_pages(queue):
        for job_id in page:
            await _purge_one(queue, job_id, result)
    result.skipped = [(i, why) for i, why in result.skipped if why != "absent"]
    return result


# --- pause, resume, remove ----------------------------------------------------------------


async def set_paused(queue: Queue, paused: bool) -> bool:
    """Pause or resume; returns whether the queue was paused before."""
    was = bool(await queue.client.hexists(queue.keys.meta, "paused"))
    await (queue.pause() if paused else queue.resume())
    return was


async def job_logs(queue: Queue, job_id: JobId) -> list[str]:
    """The lines of a job's log, oldest first; UnknownJobError when there is neither a job nor a
    log (a completed job's log went with its row)."""
    lines = await read_log(queue, job_id)
    if not lines and not await queue.client.exists(queue.keys.job(job_id)):
        raise UnknownJobError(queue.name, job_id)
    return lines


async def remove_job(queue: Queue, job_id: JobId) -> None:
    try:
        removed = await queue.remove(job_id)
    except LockedError as exc:
        raise JobHeldError(queue.name, job_id) from exc
    if not removed:
        raise UnknownJobError(queue.name, job_id)


CANCEL_KEEP_MS = 24 * 3600 * 1000
"""How long an unanswered cancel request is kept (a crashed holder's job is cancelled when it
is claimed again, as long as the request lasts)."""


class NotRunningError(AdminError):
    def __init__(self, queue: str, job_id: str, where: str) -> None:
        super().__init__(
            f"job {job_id} in queue {queue!r} is not running ({where}); "
            "`remove` deletes a job that is not held"
        )


async def cancel_job(queue: Queue, job_id: JobId) -> None:
    """Ask the worker holding a running job to stop it: the request rides on its next renewal
    sweep (no extra round trip for the worker), and the job is settled dead, fenced."""
    where = await queue.state_of(job_id)
    if where == "absent":
        raise UnknownJobError(queue.name, job_id)
    if where != JobState.ACTIVE:
        raise NotRunningError(queue.name, job_id, where)
    async with queue.client.pipeline(transaction=True) as pipe:
        pipe.sadd(queue.keys.cancel, job_id)
        pipe.pexpire(queue.keys.cancel, CANCEL_KEEP_MS)
        await pipe.execute()


# --- rendering ----------------------------------------------------------------------------


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
    lines = lines or ["no queues found"]
    if discovery is not None and not discovery.complete:
        lines.append(
            f"(queue scan cut short after {discovery.scan_calls} SCAN calls of COUNT "
            f"{SCAN_COUNT}; there may be more queues: name them with --queue)"
        )
    return "\n".join(lines)


def _when(ms: int, now_ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    delta = (ms - now_ms) / 1000
    return f"{stamp} ({'in ' if delta >= 0 else ''}{abs(delta):.1f} s{' ago' if delta < 0 else ''})"


def render_inspection(job: Inspection) -> str:
    lines = [("job", job.job_id), ("queue", job.queue), ("where", job.where)]
    known = [f for f in Field if f in job.row]
    fields = [*known, *sorted(set(job.row) - set(known))]
    lines += [(name, escape(job.row[name])) for name in fields]
    if job.lease_deadline_ms is not None:
        lines.append(("lease", "deadline " + _when(job.lease_deadline_ms, job.server_now_ms)))
    if job.lock_value is not None:
        ttl = "no TTL" if job.lock_ttl_ms is None else f"ttl {job.lock_ttl_ms / 1000:.1f} s"
        lines.append(("lock", f"{escape(job.lock_value)} ({ttl})"))
    if job.scheduled_at_ms is not None:
        lines.append(("scheduled", _when(job.scheduled_at_ms, job.server_now_ms)))
    shown = escape(job.payload[:PAYLOAD_SHOWN])
    if len(job.payload) > PAYLOAD_SHOWN:
        shown += f" ... ({job.payload_bytes} bytes in all)"
    lines.append(("payload", shown))
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
