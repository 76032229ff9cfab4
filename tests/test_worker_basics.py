"""The worker end to end, in-process, on a real redis-server."""

from __future__ import annotations

from typing import Any

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


async def test_a_job_runs_once_and_its_row_is_gone(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    seen: list[tuple[str, int, int]] = []

    @app.task
    async def charge(ctx: JobContext, order_id: str, amount: int) -> None:
        seen.append((order_id, amount, ctx.attempt))

    producer = Producer(client)
    enqueued = await producer.enqueue(queue_name, "charge", {"order_id": "A1", "amount": 1200})
    async with running_worker(worker_settings(queue_name, redis_url), app) as worker:
        await eventually(lambda: _async(worker.counters.completed == 1), what="completion")
    assert seen == [("A1", 1200, 1)]
    queue = producer.queue(queue_name)
    assert await queue.get_job(enqueued.job_id) is None
    counts = await queue.counts()
    assert (counts.pending, counts.active, counts.completed) == (0, 0, 1)


async def test_a_failing_job_retries_then_dead_letters_with_last_error(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    attempts: list[int] = []

    @app.task(max_attempts=3)
    async def flaky(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        raise RuntimeError(f"boom {ctx.attempt}")

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "flaky")).job_id
    async with running_worker(worker_settings(queue_name, redis_url), app) as worker:
        await eventually(lambda: _async(worker.counters.dead_lettered == 1), what="dead letter")
    assert attempts == [1, 2, 3]
    row = await producer.queue(queue_name).get_job(job)
    assert row is not None
    assert row["state"] == "dead"
    assert row["last_error"] == "RuntimeError: boom 3"
    assert await producer.queue(queue_name).state_of(job) == "dead"


async def _async(value: Any) -> Any:
    await anyio.lowlevel.checkpoint()
    return value
