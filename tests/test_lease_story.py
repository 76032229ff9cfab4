"""The seed's story, scaled down: a job longer than its lease survives while it is renewed.

A job runs past its lease (1.5 s) under worker A while worker B watches the same queue with a
50 ms beat. With renewal, A keeps the job for as long as it runs (until A renewed it RENEWALS
times and a lease has passed): it runs once. Without renewal, the lease lapses, B's reaper
returns the job and B runs it again at attempt 2 (A's run lasts until then), and A's late
completion is fenced out: the proof that the first half can fail. The jobs end on those events,
not after a set time, and the lease keeps a job through a stall of the test's loop of up to
lease - renewal interval - stop margin (0.9 s; at 400 ms, a loaded machine's stall self-fenced
A and ran the job twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, WorkerSettings
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until

LEASE_MS = 1_500
RENEWALS = 4
"""A's renewal sweeps (a third of a lease apart) while its job runs, at least."""

Record = list[tuple[str, int]]


def settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    options: dict[str, Any] = {"beat_ms": 50, "lease_ms": LEASE_MS, "concurrency": 1}
    return worker_settings(queue, url, **(options | overrides))


def long_job_app(
    label: str,
    started: Record,
    finished: Record,
    ends: Callable[[], bool] = lambda: True,
    ran_s: list[float] | None = None,
) -> App:
    """An App whose `long_job` records (worker label, attempt) when it starts and finishes, and
    runs until `ends()` (how long, in `ran_s`)."""
    app = App()

    @app.task
    async def long_job(ctx: JobContext) -> None:
        began = time.monotonic()
        started.append((label, ctx.attempt))
        await until(ends, what=f"the end of {label}'s run", within=30)
        finished.append((label, ctx.attempt))
        if ran_s is not None:
            ran_s.append(time.monotonic() - began)

    return app


async def completed_count(client: Redis, queue: str) -> int:
    return (await Producer(client).queue(queue).counts()).completed


async def test_a_renewed_job_longer_than_its_lease_runs_exactly_once(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: Record = []
    finished: Record = []
    ran_s: list[float] = []
    sweeps: list[int] = []  # A's renewal sweeps when the job was enqueued
    began: list[float] = []  # and when
    producer = Producer(client)

    def renewed_enough() -> bool:  # and past its lease (a lower bound: load only lengthens it)
        renewed = worker_a.counters.renew_sweeps >= sweeps[0] + RENEWALS
        return renewed and time.monotonic() - began[0] > LEASE_MS / 1000

    app_a = long_job_app("A", started, finished, renewed_enough, ran_s)
    app_b = long_job_app("B", started, finished)
    async with running_worker(settings(queue_name, redis_url, beat_ms=100), app_a) as worker_a:
        sweeps.append(worker_a.counters.renew_sweeps)
        began.append(time.monotonic())
        job = (await producer.enqueue(queue_name, "long_job")).job_id
        await until(lambda: started == [("A", 1)], what="A starting the job")
        async with running_worker(settings(queue_name, redis_url), app_b) as worker_b:
            await until(
                lambda: worker_a.counters.completed == 1, what="A completing the job", within=30
            )

    assert ran_s[0] > LEASE_MS / 1000, "the job did not outlast its lease"
    assert started == [("A", 1)]
    assert finished == [("A", 1)]
    assert worker_b.counters.claimed == 0
    assert worker_a.counters.claimed == 1
    assert worker_a.counters.leases_lost == worker_a.counters.fenced == 0
    assert worker_a.counters.reaped == worker_b.counters.reaped == 0
    assert await completed_count(client, queue_name) == 1
    assert await producer.queue(queue_name).state_of(job) == "absent"


async def test_without_renewal_the_lease_lapses_and_another_worker_runs_it_again(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: Record = []
    finished: Record = []
    ran_s: list[float] = []
    # A runs until B has started the job again; B, until A's late completion has been fenced.
    app_a = long_job_app("A", started, finished, lambda: ("B", 2) in started, ran_s)
    app_b = long_job_app("B", started, finished, lambda: worker_a.counters.fenced == 1)
    producer = Producer(client)
    no_renewal = settings(queue_name, redis_url, beat_ms=100, renew=False)

    async with running_worker(no_renewal, app_a) as worker_a:
        job = (await producer.enqueue(queue_name, "long_job")).job_id
        await until(lambda: started == [("A", 1)], what="A starting the job")
        async with running_worker(settings(queue_name, redis_url), app_b) as worker_b:
            await until(
                lambda: worker_b.counters.completed == 1, what="B completing the job", within=30
            )
            await until(lambda: worker_a.counters.fenced == 1, what="A's late complete fenced")

    assert ran_s[0] > LEASE_MS / 1000, "A's run did not outlast its lease"
    assert started == [("A", 1), ("B", 2)]
    assert sorted(finished) == [("A", 1), ("B", 2)]
    assert worker_b.counters.claimed == 1
    assert worker_a.counters.completed == 0
    assert worker_a.counters.reaped + worker_b.counters.reaped == 1
    assert await completed_count(client, queue_name) == 1
    assert await producer.queue(queue_name).state_of(job) == "absent"
