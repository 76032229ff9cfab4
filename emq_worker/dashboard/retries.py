"""The retries: scheduled jobs waiting to run again after a failure (Sidekiq's Retries), apart
from the jobs enqueued to run later. Both wait in `schedule`; a failure leaves `last_error` on
the row (fail and EchoMQ's retry write it; an enqueue never does), so the tab reads the first
RETRIES_READ members in run-at order and keeps those with one. A page then costs the same
however many jobs are scheduled; past RETRIES_READ the listing says it is partial."""

from __future__ import annotations

from redis.asyncio import Redis

from emq_worker.dashboard.listing import PER_PAGE, Listing, peek
from emq_worker.dashboard.queues import Page
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import Field
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import queue_time, to_ms

RETRIES_READ = 10_000
"""Scheduled jobs the tab looks at, soonest (or latest) first."""


async def list_retries(client: Redis, queue: str, number: int, *, newest_first: bool) -> Listing:
    keys = QueueKeys.of(queue)
    async with client.pipeline(transaction=False) as pipe:
        queue_time(pipe, keys.pending)
        pipe.zrange(keys.schedule, 0, RETRIES_READ - 1, desc=newest_first, withscores=True)
        pipe.zcard(keys.schedule)
        now, members, size = await pipe.execute()
    scored = [(text(pair[0]), int(pair[1])) for pair in members]
    async with client.pipeline(transaction=False) as pipe:
        for job_id, _ in scored:
            pipe.hexists(keys.job(job_id), Field.LAST_ERROR)
        failed = await pipe.execute()
    retries = [pair for pair, hit in zip(scored, failed, strict=True) if hit]
    page = Page(number, PER_PAGE, len(retries))
    rows = await peek(client, keys, "scheduled", retries[page.start : page.stop + 1])
    complete = int(size) <= RETRIES_READ
    return Listing(queue, "retries", page, rows, to_ms(now), newest_first, complete=complete)
