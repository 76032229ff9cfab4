"""Dead-letter verbs: list the dead jobs of a queue, retry them, purge them.

Retry and purge take named ids or walk every dead job once, in pages, and report what they did
and which named jobs they left alone (and why).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from emq_worker.errors import LockedError, StateError
from emq_worker.protocol.names import Field, JobId, JobState, attempts_run
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text

DEAD_PAGE = 1000


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
            pipe.hmget(queue.keys.job(job_id), Field.ATTEMPTS, Field.FENCED, Field.LAST_ERROR)
        rows = await pipe.execute()
    return [
        DeadJob(job_id, attempts_run(attempts, fenced), "" if error is None else text(error))
        for job_id, (attempts, fenced, error) in zip(ids, rows, strict=True)
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
    except LockedError:
        result.skipped.append((job_id, "held by a worker (EMQLOCK)"))
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
    result = await _each_dead(queue, ids, _retry_one)
    if ids is None:
        result.skipped.clear()  # with --all, a job reprocessed by someone else is not news
    return result


async def purge_dead(queue: Queue, ids: Sequence[JobId] | None) -> BulkResult:
    """Delete the named dead jobs (row, subkeys, set member), or every dead job when `ids` is
    None, each through the remove script (which refuses a held job)."""
    result = await _each_dead(queue, ids, _purge_one)
    if ids is None:
        result.skipped = [(i, why) for i, why in result.skipped if why != "absent"]
    return result


async def _each_dead(
    queue: Queue,
    ids: Sequence[JobId] | None,
    one: Callable[[Queue, JobId, BulkResult], Awaitable[None]],
) -> BulkResult:
    """`one` on each named job, or on every dead job page by page when `ids` is None."""
    result = BulkResult()
    if ids is not None:
        for job_id in ids:
            await one(queue, job_id, result)
        return result
    async for page in dead_pages(queue):
        for job_id in page:
            await one(queue, job_id, result)
    return result
