"""Emptying a queue's pending jobs: every job waiting to be claimed is deleted (row, logs,
receipt, its dedup key), each through the remove script, which refuses a job a worker has
claimed meanwhile. Held, scheduled and dead jobs stay."""

from __future__ import annotations

from emq_worker.admin.dead import BulkResult
from emq_worker.errors import LockedError, StateError
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text

PAGE = 200
"""Pending ids read per ZRANGE."""


async def clear_pending(queue: Queue) -> BulkResult:
    """Delete the jobs pending when it starts (at most that many: jobs enqueued meanwhile may
    stay); a job claimed between the read and its removal is left to its worker."""
    result = BulkResult()
    budget = int(await queue.client.zcard(queue.keys.pending))
    while budget > 0:
        page = [JobId(text(i)) for i in await queue.client.zrange(queue.keys.pending, 0, PAGE - 1)]
        before = result.done
        for job_id in page[:budget]:
            await _remove_one(queue, job_id, result)
        budget -= len(page)
        if not page or result.done == before:
            break  # nothing left, or nothing removable at the head: do not spin
    return result


async def _remove_one(queue: Queue, job_id: JobId, result: BulkResult) -> None:
    try:
        if await queue.remove(job_id, only_pending=True):
            result.done += 1
    except LockedError:
        result.skipped.append((job_id, "held by a worker (EMQLOCK)"))
    except StateError:
        result.skipped.append((job_id, "claimed meanwhile"))
