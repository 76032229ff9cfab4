"""Operator verbs: discovery, stats, inspect, pause/resume, logs, remove, cancel.

Small async functions over a client, composed from the queue verbs; the CLI parses options, calls
one of these and prints what it returns (text from `admin_render`). Dead-letter verbs live in
`admin_dead`. Nothing here reads the environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ResponseError

from emq_worker.admin.flow_inspect import FlowView, flow_view
from emq_worker.errors import EmqError, LockedError
from emq_worker.jobs.writes import read_log
from emq_worker.protocol.keys import QueueKeys, validate_queue_name
from emq_worker.protocol.lane_verbs import NO_LANES, LanesView, read_lanes
from emq_worker.protocol.names import Field, JobId, JobState
from emq_worker.protocol.partitions import read_plans
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.servertime import queue_time, to_ms
from emq_worker.protocol.values import Counts
from emq_worker.valkey.scan import SCAN_BUDGET, SCAN_COUNT, BoundedScan

PAYLOAD_SHOWN = 2000
"""Characters of a payload `inspect` shows; the rest is summarised."""
COUNT_FIELDS = ("pending", "active", "scheduled", "dead", "completed", "dead_lettered")
"""What stats shows: the four depths, then two counters (completed; dead_lettered, every move to
dead so far, which the metrics:failed key counts and the JSON also gives as `failed`)."""


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
    lanes: LanesView = NO_LANES
    """The queue's fair lanes (jobs enqueued with a group wait there, not in pending)."""

    def as_dict(self) -> dict[str, Any]:
        values = {name: getattr(self.counts, name) for name in COUNT_FIELDS}
        values["failed"] = self.counts.failed  # the old name of dead_lettered, for scripts
        error = {"error": self.error} if self.error else {}
        lanes = {"lanes": self.lanes.as_dict()} if self.lanes.groups else {}
        return {"queue": self.queue, "paused": self.paused, **values, **error, **lanes}


async def queue_stats(queue: Queue) -> QueueStats:
    """One queue's depths and counters. A key of the wrong type (WRONGTYPE: something else wrote
    into the queue's keyspace) is reported for that queue alone; the other queues still list."""
    try:
        counts = await queue.counts()
        paused = bool(await queue.client.hexists(queue.keys.meta, "paused"))
        lanes = await read_lanes(queue)
    except ResponseError as exc:
        # redis-py wraps a pipeline's error in "Command # n (...) of pipeline caused error":
        # lead with the error's own code, which is what an operator searches for.
        reason = str(exc)
        code = next((c for c in ("WRONGTYPE", "NOPERM") if c in reason), "ERR")
        return QueueStats(queue.name, False, NO_COUNTS, error=f"{code}: {reason}")
    return QueueStats(queue.name, paused, counts, lanes=lanes)


async def stats(
    client: Redis, scripts: Scripts, names: Sequence[str]
) -> tuple[list[QueueStats], Discovery | None]:
    """Stats of the named queues (each must exist), or of every queue discovery finds."""
    if names:
        queues = await _named_queues(client, scripts, names)
        found = None
    else:
        found = await discover_queues(client)
        queues = [Queue(client, scripts, name) for name in found.queues]
    return [await queue_stats(queue) for queue in queues], found


async def _named_queues(client: Redis, scripts: Scripts, names: Sequence[str]) -> list[Queue]:
    """The queues named; a partitioned one stands for every partition workers on it serve."""
    queues = []
    for name in names:
        parts = await partition_queues(client, scripts, name)
        queues += parts if parts is not None else [await open_queue(client, scripts, name)]
    return queues


async def partition_queues(client: Redis, scripts: Scripts, name: str) -> list[Queue] | None:
    """Every partition workers on `name` serve, when it is partitioned; else None."""
    try:
        plan = (await read_plans(client, [name])).get(name)
    except NoPermissionError:  # an ACL without the {emq} keys: the name is a plain queue
        return None
    return None if plan is None else [Queue(client, scripts, served) for served in plan.served()]


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
    flow: FlowView | None = None
    """A flow child's parent, or a flow parent's record of its children."""

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
            "flow": None if self.flow is None else self.flow.as_dict(),
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
        queue_time(pipe, k.active)
        pipe.zscore(k.active, job_id)
        pipe.zscore(k.schedule, job_id)
        pipe.get(k.lock(job_id))
        pipe.pttl(k.lock(job_id))
        pipe.hstrlen(k.job(job_id), Field.PAYLOAD)
        now, deadline, run_at, lock, ttl, size = await pipe.execute()
    payload = row.pop(Field.PAYLOAD, "")
    return Inspection(
        queue=queue.name,
        job_id=job_id,
        where=where,
        row=row,
        payload=payload,
        payload_bytes=int(size),
        server_now_ms=to_ms(now),
        lease_deadline_ms=_ms(deadline),
        lock_value=None if lock is None else text(lock),
        lock_ttl_ms=int(ttl) if lock is not None and int(ttl) >= 0 else None,
        scheduled_at_ms=_ms(run_at),
        flow=await flow_view(queue, job_id, row),
    )


# --- pause, resume, remove ----------------------------------------------------------------


async def set_paused(queue: Queue, paused: bool) -> bool:
    """Pause or resume; returns whether the queue was paused before."""
    was = bool(await queue.client.hexists(queue.keys.meta, "paused"))
    await (queue.pause() if paused else queue.resume())
    return was


async def set_paused_by_name(
    client: Redis, scripts: Scripts, name: str, paused: bool
) -> tuple[bool, int]:
    """Pause or resume `name`, every partition of it when it is partitioned; whether it was
    paused before (pausing: all of them were; resuming: any was), and how many queues."""
    queues = await partition_queues(client, scripts, name) or [Queue(client, scripts, name)]
    was = [await set_paused(queue, paused) for queue in queues]
    return (all(was) if paused else any(was)), len(queues)


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


class NotScheduledError(AdminError):
    def __init__(self, queue: str, job_id: str, where: str) -> None:
        super().__init__(f"job {job_id} in queue {queue!r} is not scheduled ({where})")
        self.where = where


async def promote_job(queue: Queue, job_id: JobId) -> None:
    """Make a scheduled job ready now (the promote script, for this one job: its lane and
    priority as at its due time, with a wake)."""
    if (await queue.promote(1, only=job_id)).promoted:
        return
    where = await queue.state_of(job_id)
    if where == "absent":
        raise UnknownJobError(queue.name, job_id)
    raise NotScheduledError(queue.name, job_id, where)


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
