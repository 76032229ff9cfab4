"""Telling a re-sent enqueue's own rows from a minted id's collision.

An enqueue whose reply was lost is re-sent once on a fresh connection (server/resend.py). When the
server had run the first sending, the re-send finds every row already there and replies
"duplicate" for each: for a caller-chosen id that is the documented answer, but for a minted id
the producer would take it for a collision with another producer on its node id and mint again,
enqueueing the job a second time. So before minting again, it checks whether the row is its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from emq_worker.protocol.queue import NewJob, Queue


async def written_by_us(queue: Queue, jobs: Sequence[NewJob]) -> list[bool]:
    """Per job: True when its row holds exactly this payload, or when it is gone but a receipt
    says it was settled (a worker took it from our first sending and completed it already)."""
    if not jobs:
        return []
    keys = queue.keys
    async with queue.client.pipeline(transaction=False) as pipe:
        for job in jobs:
            pipe.hget(keys.job(job.id), "payload")
            pipe.exists(keys.receipt(job.id))
        replies = await pipe.execute()
    found = zip(replies[0::2], replies[1::2], strict=True)
    return [
        payload == job.payload or (payload is None and bool(receipt))
        for job, (payload, receipt) in zip(jobs, found, strict=True)
    ]
