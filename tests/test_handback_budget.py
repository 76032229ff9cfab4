"""A lease handed back on a graceful stop (release, or withdraw of a hand-off offer) spent no
attempt: the token still rises at the next claim, but the retry budget does not shrink. Four
restarts during one long job must not leave it dead-lettered by its first real failure."""

from __future__ import annotations

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import HeldLease
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

MAX_ATTEMPTS = 3


async def test_four_graceful_restarts_do_not_spend_the_retry_budget(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started = anyio.Event()
    fail_now = False
    app = App()

    @app.task(max_attempts=MAX_ATTEMPTS)
    async def long(ctx: JobContext) -> None:
        started.set()
        if fail_now:
            raise RuntimeError("a real failure")
        await anyio.sleep_forever()

    job = (await Producer(client).enqueue(queue_name, "long")).job_id
    row = QueueKeys.of(queue_name).job(job)
    settings = worker_settings(queue_name, redis_url, grace_ms=0)
    for _ in range(4):  # four restarts while the job runs: each hands the lease back
        started = anyio.Event()
        async with running_worker(settings, app):
            with anyio.fail_after(10):
                await started.wait()
    assert await client.hget(row, "attempts") == b"4"
    assert await client.hget(row, "state") == b"pending"
    fail_now = True
    async with running_worker(settings, app) as worker:
        await eventually(lambda: _settled(worker), what="the job's first real failure settled")
    assert worker.counters.dead_lettered == 0
    assert await client.hget(row, "state") in (b"scheduled", b"pending")


async def _settled(worker: object) -> bool:
    counters = worker.counters  # type: ignore[attr-defined]
    return bool(counters.retried + counters.dead_lettered)


async def test_release_counts_the_hand_back_apart_from_the_attempts(
    client: Redis, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    job = (await Producer(client).enqueue(queue_name, "t")).job_id
    for _ in range(4):
        [claimed] = (await queue.claim(1, 30_000)).jobs
        assert await queue.release([HeldLease(claimed.id, claimed.token, claimed.nonce)]) == 1
    [claimed] = (await queue.claim(1, 30_000)).jobs
    assert claimed.token == 5
    lease = HeldLease(claimed.id, claimed.token, claimed.nonce)
    settled = await queue.fail(lease, 60_000, delay_ms=0, max_attempts=2, error="boom")
    assert settled.detail == "pending"  # one attempt spent of 2, not 5
    assert await client.hget(queue.keys.job(job), "attempts_base") == b"4"
