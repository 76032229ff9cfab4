"""A silently cut holder stops its handlers a margin before the server may reap their leases,
by a timer of its own (even with a busy event loop), and a cut shorter than half a lease costs
no lease at all: the worker's path to the server runs through a relay the test cuts (relay.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, Worker, WorkerSettings
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.scripts import Scripts
from tests.support.relay import Relay
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until

LEASE_MS, RENEW_MS, BEAT_MS = 1_500, 500, 250
JOBS = 4
MARGIN_MS = 100
"""The derived stop margin for this lease: max(100 ms, 5 % of 1500 ms), at most half a tick."""
ODD_RENEW_MS = 400
"""A renewal interval whose ticks do not end near the lease's deadline (1500 is no multiple of
400): the stop must come from its own timer, not from the end of some tick."""

pytestmark = pytest.mark.fault


def cut_settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    options = {
        "lease_ms": LEASE_MS,
        "renew_every_ms": RENEW_MS,
        "beat_ms": BEAT_MS,
        "grace_ms": 100,
    }
    return worker_settings(queue, url, concurrency=JOBS + 1, **(options | overrides))


def held_app(started: list[tuple[str, int]], stopped: dict[str, float]) -> App:
    """`held` runs until cancelled and notes when; `busy` blocks the loop 30 ms in every 100."""
    app = App()

    @app.task
    async def held(ctx: JobContext) -> None:
        started.append((ctx.job_id, ctx.attempt))
        try:
            await anyio.sleep_forever()
        finally:
            stopped[ctx.job_id] = time.monotonic()

    @app.task
    async def busy(ctx: JobContext) -> None:
        started.append((ctx.job_id, ctx.attempt))
        try:
            while True:
                busy_until = time.monotonic() + 0.03
                while time.monotonic() < busy_until:  # CPU work between awaits: the loop waits
                    pass
                await anyio.sleep(0.07)
        finally:
            stopped[ctx.job_id] = time.monotonic()

    return app


@asynccontextmanager
async def relayed(redis_url: str) -> AsyncIterator[Relay]:
    host, _, port = redis_url.removeprefix("redis://").partition("/")[0].rpartition(":")
    async with Relay(host, int(port)).running() as relay:
        yield relay


async def server_ms_minus_local_ms(client: Redis) -> float:
    """Server clock (ms) minus this process's monotonic clock (ms), to a loopback round trip."""
    before = time.monotonic()
    seconds, micros = await client.time()
    after = time.monotonic()
    return seconds * 1000 + micros / 1000 - (before + after) / 2 * 1000


async def stop_gaps_ms(client: Redis, queue: str, stopped: dict[str, float]) -> dict[str, float]:
    """Per job: how long before its lease's deadline on the server its handler was stopped."""
    offset = await server_ms_minus_local_ms(client)
    active = QueueKeys.of(queue).active
    gaps = {}
    for job_id, at in stopped.items():
        deadline = await client.zscore(active, job_id)
        assert deadline is not None, f"{job_id} was reaped before its deadline was read"
        gaps[job_id] = deadline - (at * 1000 + offset)
    return gaps


async def cut_until_all_stopped(
    worker: Worker, relay: Relay, stopped: dict[str, float], jobs: int
) -> None:
    await until(lambda: worker.counters.renew_sweeps >= 1, what="a renewal answered")
    relay.cut()
    await until(
        lambda: len(stopped) == jobs, what="every handler stopped", within=LEASE_MS / 1000 * 3
    )


async def enqueue_jobs(client: Redis, queue_name: str, tasks: list[str]) -> None:
    """One job per task name, in order."""
    producer = Producer(client)
    for task in tasks:
        await producer.enqueue(queue_name, task)


async def test_a_cut_off_handler_is_cancelled_a_margin_before_the_server_deadline(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: list[tuple[str, int]] = []
    stopped: dict[str, float] = {}
    await enqueue_jobs(client, queue_name, ["held"] * JOBS)
    async with relayed(redis_url) as relay:
        options = cut_settings(queue_name, relay.url, renew_every_ms=ODD_RENEW_MS)
        async with running_worker(options, held_app(started, stopped)) as worker:
            await until(lambda: len(started) == JOBS, what="every job started")
            await cut_until_all_stopped(worker, relay, stopped, JOBS)
            gaps = await stop_gaps_ms(client, queue_name, stopped)
            fenced = worker.counters.self_fenced
            relay.heal()
    story = f"stopped this many ms before the server's deadline: {gaps}; margin {MARGIN_MS} ms"
    assert fenced == JOBS, story
    assert min(gaps.values()) >= MARGIN_MS / 2, story


async def test_a_handler_blocking_the_loop_does_not_push_the_stop_past_the_server_deadline(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: list[tuple[str, int]] = []
    stopped: dict[str, float] = {}
    await enqueue_jobs(client, queue_name, ["busy"] + ["held"] * (JOBS - 1))
    async with relayed(redis_url) as relay:
        options = cut_settings(queue_name, relay.url, renew_every_ms=ODD_RENEW_MS)
        async with running_worker(options, held_app(started, stopped)) as worker:
            await until(lambda: len(started) == JOBS, what="every job started")
            await cut_until_all_stopped(worker, relay, stopped, JOBS)
            gaps = await stop_gaps_ms(client, queue_name, stopped)
            relay.heal()
    story = f"stopped this many ms before the server's deadline: {gaps}; margin {MARGIN_MS} ms"
    # The loop is late by up to one 30 ms block: that comes out of the margin, no more.
    assert min(gaps.values()) >= MARGIN_MS / 4, story


@pytest.mark.parametrize("share", [0.4, 0.45])
async def test_a_silent_cut_under_half_a_lease_just_before_a_tick_loses_no_lease(
    client: Redis, redis_url: str, queue_name: str, share: float
) -> None:
    started: list[tuple[str, int]] = []
    stopped: dict[str, float] = {}
    await enqueue_jobs(client, queue_name, ["held"] * JOBS)
    async with relayed(redis_url) as relay:
        relay.watch = Scripts().by_name["renew"].sha.encode()
        options = cut_settings(queue_name, relay.url)
        async with running_worker(options, held_app(started, stopped)) as worker:
            await until(lambda: len(started) == JOBS, what="every job started")
            await until(lambda: worker.counters.renew_sweeps >= 1, what="a renewal answered")
            tick = relay.marks[-1]  # a renewal tick; the next ones follow every RENEW_MS
            cut_at = tick + (RENEW_MS - 30) / 1000
            while cut_at < time.monotonic() + 0.05:
                cut_at += RENEW_MS / 1000
            await anyio.sleep(cut_at - time.monotonic())  # placing the cut, not waiting on it
            relay.cut()
            await anyio.sleep(share * LEASE_MS / 1000)  # the cut's length
            relay.heal()
            sweeps = worker.counters.renew_sweeps
            await until(
                lambda: worker.counters.renew_sweeps >= sweeps + 2 * LEASE_MS // RENEW_MS,
                what="two leases' worth of renewals after the heal",
            )
            counters = worker.counters.snapshot()
    story = f"counters {counters}; starts {started}; stopped {sorted(stopped)}"
    assert counters["self_fenced"] == counters["leases_lost"] == 0, story
    assert sorted(attempt for _, attempt in started) == [1] * JOBS, story
    assert len({job_id for job_id, _ in started}) == JOBS, story
