"""The renewal sweep: K leases cost one `renew` call per queue per tick; a lost lease stops its
job at once and writes nothing; a worker that cannot renew for a whole lease fences itself."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, JobSpec, Producer, WorkerSettings
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import RENEW_CHUNK, HeldLease
from tests.support.apps import cancellable_app
from tests.support.running import running_worker, worker_settings
from tests.support.server import RedisServer
from tests.support.wait import until

K = 500
TICKS = 3


def settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    return worker_settings(queue, url, **({"renew_every_ms": 200} | overrides))


def held_app(started: list[int], release: anyio.Event) -> App:
    app = App()

    @app.task
    async def held(ctx: JobContext) -> None:
        started.append(ctx.attempt)
        await release.wait()

    return app


async def active_scores(client: Redis, keys: QueueKeys) -> dict[bytes, float]:
    pairs = cast(
        list[tuple[bytes, float]], await client.zrange(keys.active, 0, -1, withscores=True)
    )
    return dict(pairs)


Call = tuple[str, list[str]]
"""A renew script call the server ran: the client's address, and the command's words."""


def whole_sets(
    calls: list[Call], per_tick: int, keys: QueueKeys, ids: Sequence[str]
) -> tuple[list[list[Call]], int, int]:
    """The calls cut into whole ticks: `per_tick` calls in a row, on one connection, renewing
    every lease in `ids` once; returns them and how many calls were left over before the first
    whole tick and after the last (a tick cut by the window's edge). A tick that is not whole in
    between fails the test."""
    sets: list[list[Call]] = []
    at = first_at = 0
    while at + per_tick <= len(calls):
        group = calls[at : at + per_tick]
        renewed: list[str] = []
        for _, words in group:
            # EVALSHA sha numkeys KEYS[1..2] then ARGV: prefix, lease_ms, one triple per lease.
            assert words[2:5] == ["2", keys.active, keys.cancel]
            assert len(words) - 7 <= 3 * RENEW_CHUNK
            renewed += words[7::3]
        whole = len({client_at for client_at, _ in group}) == 1 and sorted(renewed) == sorted(ids)
        if whole:
            if not sets:
                first_at = at
            sets.append(group)
            at += per_tick
        elif sets:
            break  # only the last may be cut: whatever follows is checked below
        else:
            at += 1  # the first, cut by the window's opening
    assert sets, f"no whole tick among {len(calls)} renew calls"
    return sets, first_at, len(calls) - at


async def test_k_held_leases_are_renewed_in_one_round_trip_per_tick(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: list[int] = []
    release = anyio.Event()
    app = held_app(started, release)
    keys = QueueKeys.of(queue_name)
    renew_sha = Scripts().by_name["renew"].sha
    producer = Producer(client)
    ids = [e.job_id for e in await producer.enqueue_many(queue_name, [JobSpec("held")] * K)]
    options = settings(
        queue_name, redis_url, concurrency=K, lease_ms=1_500, renew_every_ms=500, beat_ms=200
    )
    monitor_client = Redis.from_url(redis_url)
    renew_calls: list[tuple[str, list[str]]] = []
    try:
        async with running_worker(options, app) as worker:
            await until(lambda: len(started) == K, what=f"all {K} jobs held")
            before = await active_scores(client, keys)
            async with monitor_client.monitor() as monitor:
                # Mark a window that starts and ends just after a sweep, half a tick from any other.
                sweeps = worker.counters.renew_sweeps
                await until(lambda: worker.counters.renew_sweeps > sweeps, what="a sweep")
                first = worker.counters.renew_sweeps
                await client.echo("window-open")
                await until(
                    lambda: worker.counters.renew_sweeps >= first + TICKS,
                    what=f"{TICKS} more sweeps",
                )
                last = worker.counters.renew_sweeps
                await client.echo("window-close")
                closed = worker.counters.renew_sweeps
                inside = False
                async for command in monitor.listen():
                    words = command["command"].split(" ")
                    if words[:2] == ["ECHO", "window-open"]:
                        inside = True
                    elif words[:2] == ["ECHO", "window-close"]:
                        break
                    elif inside and words[:2] == ["EVALSHA", renew_sha] and keys.active in words:
                        client_at = f"{command['client_address']}:{command['client_port']}"
                        renew_calls.append((client_at, words))
            after = await active_scores(client, keys)
            async with client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hget(keys.job(job_id), "attempts")
                attempts = await pipe.execute()
            counters = worker.counters.snapshot()
            release.set()
            await until(lambda: worker.counters.completed == K, what="all jobs completed")
    finally:
        await monitor_client.aclose()

    assert last - first >= TICKS
    # Each tick renews all K leases in ceil(K / RENEW_CHUNK) script calls of one pipeline: one
    # round trip, the calls arriving together on one connection, so no call holds the server long.
    per_tick = -(-K // RENEW_CHUNK)
    sets, cut_first, cut_last = whole_sets(renew_calls, per_tick, keys, ids)
    # The window's edges are two ECHOs racing the sweeps: on a busy machine the server may run an
    # ECHO between two calls of one pipeline, so a set at either edge can be cut (left out); and
    # the sweeps that fell inside lie between those that ended before it opened (`first`) and
    # those that had ended once it had closed (`closed`), one in flight at its opening included.
    assert cut_first < per_tick, "whole pipelined sets of calls only"
    assert cut_last < per_tick, "whole pipelined sets of calls only"
    cuts = (cut_first > 0) + (cut_last > 0)
    assert last - first - 1 - cuts <= len(sets) <= closed - first + 1, (
        "one pipelined set of calls per tick"
    )
    assert started == [1] * K
    assert attempts == [b"1"] * K
    assert len(before) == len(after) == K
    assert all(after[member] > before[member] for member in before), "deadlines moved forward"
    assert counters["reaped"] == counters["leases_lost"] == counters["self_fenced"] == 0
    assert counters["claimed"] == K


async def test_a_lease_the_server_reports_lost_cancels_its_job_and_writes_nothing(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    events: list[str] = []
    app = cancellable_app(events)

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "long_job")).job_id
    keys = QueueKeys.of(queue_name)
    async with running_worker(settings(queue_name, redis_url), app) as worker:
        await until(lambda: events == ["started"], what="the job starting")
        # Simulate a re-claim elsewhere: the fencing token moves on under the holder.
        assert await client.hincrby(keys.job(job), "attempts", 1) == 2
        await until(lambda: events == ["started", "cancelled"], what="the handler cancelled")
        assert worker.counters.fenced >= 1
        assert worker.counters.leases_lost == 1
        row = await producer.queue(queue_name).get_job(job)
    assert events == ["started", "cancelled"]
    assert worker.counters.completed == worker.counters.retried == 0
    assert worker.counters.released == 0
    assert row is not None
    assert (row["state"], row["attempts"]) == ("active", "2")
    assert "last_error" not in row
    assert await producer.queue(queue_name).get_job(job) == row, "nothing written at shutdown"
    assert await producer.queue(queue_name).state_of(job) == "active"
    counts = await producer.queue(queue_name).counts()
    assert (counts.completed, counts.failed) == (0, 0)


@pytest.mark.fault
async def test_a_worker_that_cannot_renew_for_a_whole_lease_gives_its_leases_up(
    tmp_path: Path, queue_name: str
) -> None:
    lease_ms, renew_ms = 600, 200
    events: list[str] = []
    app = cancellable_app(events)

    with RedisServer(tmp_path / "r") as server:
        options = settings(
            queue_name, server.url, lease_ms=lease_ms, renew_every_ms=renew_ms, grace_ms=200
        )
        async with Producer.from_url(server.url) as producer:
            await producer.enqueue(queue_name, "long_job")
        with anyio.fail_after(10):
            async with running_worker(options, app) as worker:
                await until(lambda: events == ["started"], what="the job starting")
                await until(lambda: worker.counters.renew_sweeps >= 1, what="a renewal")
                server.kill()
                killed_at = anyio.current_time()
                await until(
                    lambda: worker.counters.self_fenced == 1,
                    what="the self-fence",
                    within=(lease_ms + renew_ms) / 1000 + 1.0,
                )
                fenced_after = anyio.current_time() - killed_at
                await until(lambda: "cancelled" in events, what="the handler cancelled")
            stopped_after = anyio.current_time() - killed_at
    assert events == ["started", "cancelled"]
    assert fenced_after <= (lease_ms + renew_ms) / 1000 + 0.3
    assert worker.counters.renew_failures >= 1
    assert worker.counters.completed == worker.counters.released == 0
    assert stopped_after < 5.0, "a graceful stop must not hang while Redis is down"


async def test_leases_stay_renewed_while_a_due_job_waits_for_a_free_slot(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """A scheduled job falling due while every slot is taken must not stop the event loop: the
    held job's renewals go on and its lease never lapses."""
    started: list[int] = []
    release = anyio.Event()
    app = App()

    @app.task
    async def held(ctx: JobContext, n: int) -> None:
        started.append(n)
        await release.wait()

    producer = Producer(client)
    await producer.enqueue(queue_name, "held", {"n": 1})
    await producer.enqueue(queue_name, "held", {"n": 2}, delay_ms=100)
    options = settings(
        queue_name, redis_url, concurrency=1, beat_ms=3_000, lease_ms=900, renew_every_ms=300
    )
    lag = 0.0
    watching = anyio.CancelScope()

    async def watch_loop_lag() -> None:
        nonlocal lag
        with watching:
            while True:
                asked = anyio.current_time()
                await anyio.sleep(0.02)
                lag = max(lag, anyio.current_time() - asked - 0.02)

    with anyio.fail_after(20):
        async with running_worker(options, app) as worker, anyio.create_task_group() as probes:
            probes.start_soon(watch_loop_lag)
            await until(lambda: started == [1], what="the first job held")
            sweeps, since = worker.counters.renew_sweeps, anyio.current_time()
            await until(lambda: worker.counters.renew_sweeps >= sweeps + 4, what="4 renewals")
            four_ticks = anyio.current_time() - since
            held_counters = worker.counters.snapshot()
            watching.cancel()
            release.set()
            await until(lambda: worker.counters.completed == 2, what="both jobs completed")
    story = f"loop stalled {lag:.2f} s; starts {started}; counters while held {held_counters}"
    # The promise: renewals go on, so no stall may reach the lease's margin over one tick. A tick
    # comes late by at most the loop lag this test measured (a busy machine's share of it).
    assert lag < (900 - 300) / 1000, story
    assert started == [1, 2], story
    assert four_ticks < 4 * (0.3 + lag) + 0.5, story
    assert held_counters["reaped"] == held_counters["leases_lost"] == 0
    assert held_counters["self_fenced"] == 0


async def _evalsha_calls(client: Redis) -> int:
    """EVALSHAs that ran (Redis counts those refused with NOSCRIPT as failed calls too)."""
    stats = (await client.info("commandstats")).get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))


async def test_a_large_k_is_renewed_in_chunks_of_one_pipeline_that_survive_noscript(
    client: Redis, queue_name: str
) -> None:
    """2 500 leases: renew calls of at most RENEW_CHUNK leases each, sent together; every deadline
    moves, and a SCRIPT FLUSH just before costs nothing but a reload."""
    producer = Producer(client)
    queue = producer.queue(queue_name)
    await producer.enqueue_many(queue_name, [JobSpec("noop") for _ in range(2_500)])
    claimed = await queue.claim(2_500, 5_000)
    assert len(claimed.jobs) == 2_500
    before = await active_scores(client, queue.keys)
    await client.script_flush()
    calls_before = await _evalsha_calls(client)
    leases = [HeldLease(job.id, job.token, job.nonce) for job in claimed.jobs]
    lost = await queue.renew(leases, 60_000)
    calls = await _evalsha_calls(client) - calls_before
    assert lost == []
    assert calls == -(-2_500 // RENEW_CHUNK), f"renew EVALSHAs that ran: {calls}"
    after = await active_scores(client, queue.keys)
    assert after.keys() == before.keys()
    assert all(after[member] >= before[member] + 50_000 for member in before)
