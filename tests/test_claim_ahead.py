"""Jobs claimed ahead of a free slot (runtime/ahead.py): while handlers are short the drain
claims the next jobs before a slot frees, yet never runs more handlers than the concurrency; a
job that waits a beat for a slot goes back to pending, and a stopping worker hands back those
still waiting instead of holding them through the grace period.

Whether to claim ahead is the pace's call (tests/test_pace.py); here it is made to say yes, so
each test sees the drain's side of it whatever the machine's speed."""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys
from emq_worker.runtime.pace import Pace
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


@pytest.fixture(autouse=True)
def claims_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Pace, "claims_ahead", lambda self, now: True)


def blocking_app(gate: anyio.Event, started: list[str]) -> App:
    app = App()

    @app.task
    async def block(ctx: JobContext) -> None:
        started.append(ctx.job_id)
        await gate.wait()

    return app


async def test_short_jobs_claimed_ahead_never_run_more_than_the_concurrency(
    redis_url: str, queue_name: str, client: Redis
) -> None:
    app, running, most, leased = App(), [0], [0], [0]
    active = QueueKeys.of(queue_name).active

    @app.task
    async def short(ctx: JobContext) -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        leased[0] = max(leased[0], int(await ctx.redis.zcard(active)))
        running[0] -= 1

    jobs, concurrency = 400, 4
    settings = worker_settings(queue_name, redis_url, concurrency=concurrency)
    async with Producer.from_url(redis_url) as producer:
        await producer.enqueue_many(queue_name, [JobSpec("short")] * jobs)
    async with running_worker(settings, app) as worker:

        async def done() -> bool:
            return worker.counters.completed == jobs

        await eventually(done, timeout=60, what=f"{jobs} jobs completed")
    assert most[0] <= concurrency
    assert leased[0] > concurrency  # jobs were held beyond the slots: claimed ahead


async def test_jobs_waiting_a_beat_for_a_slot_go_back_to_pending(
    redis_url: str, queue_name: str
) -> None:
    gate, started = anyio.Event(), list[str]()
    settings = worker_settings(queue_name, redis_url, concurrency=2)
    async with Producer.from_url(redis_url) as producer:
        await producer.enqueue_many(queue_name, [JobSpec("block")] * 4)
    async with running_worker(settings, blocking_app(gate, started)) as worker:

        async def handed_back() -> bool:
            return worker.counters.released >= 2

        await eventually(handed_back, what="the jobs claimed ahead handed back")
        assert len(started) == 2  # the slots still run the first two
        gate.set()

        async def done() -> bool:
            return worker.counters.completed == 4

        await eventually(done, what="all four completed")
    assert len(set(started)) == 4


async def test_a_stopping_worker_hands_back_the_jobs_waiting_for_a_slot(
    redis_url: str, queue_name: str, client: Redis
) -> None:
    gate, started = anyio.Event(), list[str]()
    keys = QueueKeys.of(queue_name)
    # A beat far longer than the test: the jobs waiting go back because the worker stops.
    settings = worker_settings(queue_name, redis_url, concurrency=2, beat_ms=30_000)
    async with Producer.from_url(redis_url) as producer:
        await producer.enqueue_many(queue_name, [JobSpec("block")] * 4)
    async with running_worker(settings, blocking_app(gate, started)) as worker:

        async def held() -> bool:
            return int(await client.zcard(keys.active)) == 4 and len(started) == 2

        await eventually(held, what="two jobs running, two claimed ahead")
        worker.request_stop()

        async def handed_back() -> bool:
            return int(await client.zcard(keys.active)) == 2

        await eventually(handed_back, what="the two waiting jobs back in pending")
        assert len(started) == 2
        assert int(await client.zcard(keys.pending)) == 2
        gate.set()
    assert worker.counters.completed == 2
    assert worker.counters.released == 2
