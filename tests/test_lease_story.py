"""The seed's story, scaled down: a job longer than its lease survives while it is renewed.

A job runs for 2.5 lease lengths (lease 400 ms, job 1 s) under worker A while worker B watches
the same queue with a 50 ms beat. With renewal, A keeps the job for as long as it runs: it runs
once. Without renewal, the lease lapses, B's reaper returns the job and B runs it again at
attempt 2, and A's late completion is fenced out: the proof that the first half can fail.
"""

from __future__ import annotations

from typing import Any

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, WorkerSettings
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until

LEASE_MS = 400
JOB_S = 1.0

Record = list[tuple[str, int]]


def settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    options: dict[str, Any] = {"beat_ms": 50, "lease_ms": LEASE_MS, "concurrency": 1}
    return worker_settings(queue, url, **(options | overrides))


def long_job_app(label: str, started: Record, finished: Record) -> App:
    """An App whose `long_job` records (worker label, attempt) when it starts and finishes."""
    app = App()

    @app.task
    async def long_job(ctx: JobContext) -> None:
        started.append((label, ctx.attempt))
        await anyio.sleep(JOB_S)
        finished.append((label, ctx.attempt))

    return app


async def completed_count(client: Redis, queue: str) -> int:
    return (await Producer(client).queue(queue).counts()).completed


async def test_a_renewed_job_longer_than_its_lease_runs_exactly_once(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: Record = []
    finished: Record = []
    app_a = long_job_app("A", started, finished)
    app_b = long_job_app("B", started, finished)
    producer = Producer(client)

    async with running_worker(settings(queue_name, redis_url, beat_ms=100), app_a) as worker_a:
        job = (await producer.enqueue(queue_name, "long_job")).job_id
        await until(lambda: started == [("A", 1)], what="A starting the job")
        async with running_worker(settings(queue_name, redis_url), app_b) as worker_b:
            await until(lambda: worker_a.counters.completed == 1, what="A completing the job")

    assert started == [("A", 1)]
    assert finished == [("A", 1)]
    assert worker_b.counters.claimed == 0
    assert worker_a.counters.claimed == 1
    assert worker_a.counters.renew_sweeps >= 2, "a 1 s job under a 400 ms lease needs renewals"
    assert worker_a.counters.leases_lost == worker_a.counters.fenced == 0
    assert worker_a.counters.reaped == worker_b.counters.reaped == 0
    assert await completed_count(client, queue_name) == 1
    assert await producer.queue(queue_name).state_of(job) == "absent"


async def test_without_renewal_the_lease_lapses_and_another_worker_runs_it_again(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: Record = []
    finished: Record = []
    app_a = long_job_app("A", started, finished)
    app_b = long_job_app("B", started, finished)
    producer = Producer(client)
    no_renewal = settings(queue_name, redis_url, beat_ms=100, renew=False)

    async with running_worker(no_renewal, app_a) as worker_a:
        job = (await producer.enqueue(queue_name, "long_job")).job_id
        await until(lambda: started == [("A", 1)], what="A starting the job")
        async with running_worker(settings(queue_name, redis_url), app_b) as worker_b:
            await until(lambda: worker_b.counters.completed == 1, what="B completing the job")
            await until(lambda: worker_a.counters.fenced == 1, what="A's late complete fenced")

    assert started == [("A", 1), ("B", 2)]
    assert sorted(finished) == [("A", 1), ("B", 2)]
    assert worker_b.counters.claimed == 1
    assert worker_a.counters.completed == 0
    assert worker_a.counters.reaped + worker_b.counters.reaped == 1
    assert await completed_count(client, queue_name) == 1
    assert await producer.queue(queue_name).state_of(job) == "absent"
