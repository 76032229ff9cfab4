"""Promote or delete several named jobs, each through its script (promote for that job; remove,
which refuses a held job), saying which were left alone and why."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from emq_worker.admin import verbs
from emq_worker.admin.dead_letter import BulkResult
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue

JobVerb = Callable[[Queue, JobId], Awaitable[None]]


async def each(queue: Queue, ids: Sequence[JobId], verb: JobVerb) -> BulkResult:
    """Run `verb` on every job of `ids`; one that is gone, held or in the wrong state is skipped
    with the reason (the others go on)."""
    result = BulkResult()
    for job_id in ids:
        try:
            await verb(queue, job_id)
        except verbs.UnknownJobError:
            result.skipped.append((job_id, "absent"))
        except verbs.JobHeldError:
            result.skipped.append((job_id, "held by a worker (EMQLOCK)"))
        except verbs.NotScheduledError as exc:
            result.skipped.append((job_id, f"not scheduled ({exc.where})"))
        else:
            result.done += 1
    return result


async def promote_jobs(queue: Queue, ids: Sequence[JobId]) -> BulkResult:
    return await each(queue, ids, verbs.promote_job)


async def delete_jobs(queue: Queue, ids: Sequence[JobId]) -> BulkResult:
    return await each(queue, ids, verbs.remove_job)
