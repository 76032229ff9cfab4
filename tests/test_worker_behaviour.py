"""Focused behaviours of the worker and the queue verbs it runs on, in-process on a real server."""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from emq_worker import App, JobContext, JobSpec, Producer, WorkerSettings
from emq_worker.admin import dead_letter, verbs
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import attempts_run
from emq_worker.protocol.replies import SettleStatus
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import HeldLease
from emq_worker.retry import Backoff, Exponential, Fixed
from emq_worker.runtime.presence import live_workers
from tests.support.apps import cancellable_app
from tests.support.lag import loop_lag
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually, until

BEAT_MS = 100


def settings(queue: str | tuple[str, ...], url: str, **overrides: Any) -> WorkerSettings:
    return worker_settings(queue, url, **({"beat_ms": BEAT_MS} | overrides))


async def server_ms(client: Redis) -> int:
    """The server clock, in ms, as the scripts compute `now_ms`."""
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def recording_app(seen: list[Any]) -> App:
    app = App()

    @app.task
    async def record(ctx: JobContext, n: int = 0) -> None:
        seen.append(n)

    return app


# ---- ordering and scheduling -----------------------------------------------------------------


async def test_jobs_run_in_mint_order_with_concurrency_one(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    seen: list[int] = []
    producer = Producer(client)
    for n in range(20):
        await producer.enqueue(queue_name, "record", {"n": n})
    async with running_worker(
        settings(queue_name, redis_url, concurrency=1), recording_app(seen)
    ) as worker:
        await until(lambda: worker.counters.completed == 20, what="20 completions")
    assert seen == list(range(20))


async def _time_a_delayed_job(
    client: Redis,
    redis_url: str,
    queue_name: str,
    enqueue: Callable[[Producer, int], Any],
) -> int:
    """Enqueue (while a worker runs) a delayed job with `enqueue(producer, server_now_ms)`;
    return the server-clock ms from just before the enqueue to the handler's start."""
    started: list[int] = []
    app = App()

    @app.task
    async def later(ctx: JobContext) -> None:
        started.append(await server_ms(client))

    producer = Producer(client)
    async with running_worker(settings(queue_name, redis_url), app) as worker:
        before = await server_ms(client)
        await enqueue(producer, before)
        await until(lambda: worker.counters.completed == 1, what="the delayed job")
    assert len(started) == 1
    return started[0] - before


async def test_a_delayed_job_runs_when_due_on_the_server_clock_not_before(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async def enqueue(producer: Producer, now_ms: int) -> None:
        await producer.enqueue(queue_name, "later", delay_ms=300)

    waited = await _time_a_delayed_job(client, redis_url, queue_name, enqueue)
    assert 300 <= waited <= 300 + BEAT_MS + 200


async def test_a_job_with_run_at_runs_at_that_time(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async def enqueue(producer: Producer, now_ms: int) -> None:
        run_at = dt.datetime.fromtimestamp((now_ms + 300) / 1000, tz=dt.UTC)
        await producer.enqueue(queue_name, "later", run_at=run_at)

    waited = await _time_a_delayed_job(client, redis_url, queue_name, enqueue)
    assert 300 <= waited <= 300 + BEAT_MS + 200


async def test_a_worker_parks_until_a_known_due_job_instead_of_a_whole_beat(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """The supervisor learns the next due time at its beat; it must wake for it then, neither a
    beat later nor by spinning on claims until the beat."""
    beat_ms = 2_000
    started: list[int] = []
    app = App()

    @app.task
    async def later(ctx: JobContext) -> None:
        started.append(await server_ms(client))

    claim_sha = Scripts().by_name["claim"].sha
    pending_key = QueueKeys.of(queue_name).pending
    claims = 0
    monitor_client = Redis.from_url(redis_url)
    try:
        async with monitor_client.monitor() as monitor:
            before = await server_ms(client)
            await Producer(client).enqueue(queue_name, "later", delay_ms=300)
            options = settings(queue_name, redis_url, beat_ms=beat_ms)
            async with running_worker(options, app) as worker:
                ready = await server_ms(client)
                await until(lambda: worker.counters.completed == 1, what="the delayed job")
                lag_ms = worker.loop_lag.max_s * 1000
                await client.echo("probe-done")
            async for command in monitor.listen():
                words = command["command"].split(" ")
                if words[:2] == ["ECHO", "probe-done"]:
                    break
                if words[:2] == ["EVALSHA", claim_sha] and pending_key in words:
                    claims += 1
    finally:
        await monitor_client.aclose()
    waited = started[0] - before
    # A worker that came up after the due time (a loaded machine) claims the job at once; the
    # slack over 200 ms is the longest lag the worker's loop measured meanwhile.
    expected = max(300, ready - before)
    story = (
        f"the job ran {waited} ms after its enqueue (due at 300 ms, the worker ready at "
        f"{ready - before} ms, its loop's longest lag {lag_ms:.0f} ms, beat {beat_ms} ms) and "
        f"the supervisor sent {claims} claims meanwhile; it should park until the due time"
    )
    assert 300 <= waited <= expected + 200 + lag_ms, story
    assert claims <= 10, story


async def test_a_paused_queue_is_not_claimed_until_resumed(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    seen: list[int] = []
    other = f"{queue_name}.other"
    producer = Producer(client)
    paused = producer.queue(queue_name)
    await paused.pause()
    ids = [(await producer.enqueue(queue_name, "record", {"n": n})).job_id for n in range(3)]
    async with running_worker(
        settings((queue_name, other), redis_url, beat_ms=50), recording_app(seen)
    ) as worker:
        # The worker is live: it runs a job from its other queue.
        await producer.enqueue(other, "record", {"n": 99})
        await until(lambda: worker.counters.completed == 1, what="the other queue's job")
        await anyio.sleep(3 * 50 / 1000)  # three beats with the queue paused: the scenario
        states = [await paused.state_of(job) for job in ids]
        rows = [await paused.get_job(job) for job in ids]
        assert worker.counters.claimed == 1
        await paused.resume()
        await until(lambda: worker.counters.completed == 4, what="the resumed queue's jobs")
    assert states == ["pending"] * 3
    assert [row["attempts"] if row else None for row in rows] == ["0"] * 3
    assert seen[0] == 99
    assert sorted(seen[1:]) == [0, 1, 2]


# ---- poison jobs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("unknown_task", "unknown task 'nope'"),
        ("not_json", "payload is not JSON"),
        ("bad_kwargs", "kwargs do not fit task 'charge'"),
    ],
)
async def test_a_poison_job_is_dead_lettered_at_once_and_the_worker_goes_on(
    client: Redis, redis_url: str, queue_name: str, kind: str, expected: str
) -> None:
    charged: list[str] = []
    app = App()

    @app.task
    async def charge(ctx: JobContext, order_id: str) -> None:
        charged.append(order_id)

    producer = Producer(client)
    if kind == "unknown_task":
        bad = await producer.enqueue(queue_name, "nope", {"order_id": "X"})
    elif kind == "not_json":
        bad = await producer.enqueue_raw(queue_name, b"\xff not json")
    else:
        bad = await producer.enqueue(queue_name, "charge", {"order": "X", "amount": 1})
    good = await producer.enqueue(queue_name, "charge", {"order_id": "A1"})
    async with running_worker(settings(queue_name, redis_url, max_attempts=5), app) as worker:
        await until(lambda: worker.counters.completed == 1, what="the good job")
        await until(lambda: worker.counters.dead_lettered == 1, what="the poison job dead")
    queue = producer.queue(queue_name)
    row = await queue.get_job(bad.job_id)
    assert row is not None
    assert (row["state"], attempts_run(row["attempts"], row.get("fenced"))) == ("dead", 1)
    assert expected in row["last_error"]
    assert await queue.state_of(bad.job_id) == "dead"
    assert await queue.state_of(good.job_id) == "absent"
    assert charged == ["A1"]
    assert worker.counters.retried == 0
    counts = await queue.counts()
    assert (counts.dead, counts.failed, counts.completed) == (1, 1, 1)


# ---- how handlers run -------------------------------------------------------------------------


async def test_a_task_timeout_cancels_the_handler_and_fails_the_job(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    events: list[str] = []
    app = App()

    @app.task(timeout_ms=100, max_attempts=2)
    async def slow(ctx: JobContext) -> None:
        events.append(f"start {ctx.attempt}")
        try:
            await anyio.sleep(5)
        except anyio.get_cancelled_exc_class():
            events.append(f"cancelled {ctx.attempt}")
            raise

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "slow")).job_id
    with anyio.fail_after(10):  # a guard against a hang, not a bound
        async with running_worker(settings(queue_name, redis_url), app) as worker:
            await until(lambda: worker.counters.dead_lettered == 1, what="the job dead")
    assert events == ["start 1", "cancelled 1", "start 2", "cancelled 2"]
    assert worker.counters.retried == 1
    row = await producer.queue(queue_name).get_job(job)
    assert row is not None
    assert (row["state"], attempts_run(row["attempts"], row.get("fenced"))) == ("dead", 2)
    assert row["last_error"] == "timed out after 100 ms"


async def test_a_sync_handler_runs_in_a_worker_thread(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    threads: list[int] = []
    app = App()

    @app.task
    def blocking(ctx: JobContext, n: int) -> None:
        threads.append(threading.get_ident())

    await Producer(client).enqueue(queue_name, "blocking", {"n": 1})
    async with running_worker(settings(queue_name, redis_url), app) as worker:
        await until(lambda: worker.counters.completed == 1, what="the sync job")
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_a_raw_handler_receives_the_payload_bytes_exactly(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    payload = b"\x00\xff{not an envelope}\r\n\x80 raw"
    received: list[tuple[bytes, str]] = []
    app = App()

    @app.raw_handler(queue_name)
    async def raw(ctx: JobContext) -> None:
        received.append((ctx.payload, ctx.task))

    job = (await Producer(client).enqueue_raw(queue_name, payload)).job_id
    async with running_worker(settings(queue_name, redis_url), app) as worker:
        await until(lambda: worker.counters.completed == 1, what="the raw job")
    assert received == [(payload, queue_name)]
    assert await Producer(client).queue(queue_name).state_of(job) == "absent"


# ---- retries -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "delays"),
    [(Fixed(400), [400, 400]), (Exponential(base_ms=250, cap_ms=60_000), [250, 500])],
)
async def test_a_failed_job_is_scheduled_after_its_backoff_on_the_server_clock(
    client: Redis, redis_url: str, queue_name: str, policy: Backoff, delays: list[int]
) -> None:
    app = App()

    @app.task(max_attempts=5, backoff=policy)
    async def flaky(ctx: JobContext) -> None:
        raise RuntimeError(f"boom {ctx.attempt}")

    producer = Producer(client)
    keys = QueueKeys.of(queue_name)
    async with running_worker(settings(queue_name, redis_url), app) as worker:
        retries: list[float] = []
        before = await server_ms(client)
        job = (await producer.enqueue(queue_name, "flaky")).job_id
        for attempt, delay in enumerate(delays, start=1):
            await until(lambda: worker.counters.retried == len(retries) + 1, what="a retry")
            after = await server_ms(client)
            score = await client.zscore(keys.schedule, job)
            assert score is not None, f"attempt {attempt} was not scheduled"
            retries.append(score)
            assert before + delay <= score <= after + delay
            row = await producer.queue(queue_name).get_job(job)
            assert row is not None
            assert row["state"] == "scheduled"
            assert row["last_error"] == f"RuntimeError: boom {attempt}"
            before = await server_ms(client)  # the next failure is `delay` ms away


async def test_a_dead_job_retried_by_an_operator_backs_off_as_on_its_first_attempt(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """`dead retry` gives the job a fresh budget (attempts_base); its backoff counts from there
    too: attempt 3 of a job retried after 2 waits 250 ms (the first step), not 1 000 ms."""
    app = App()
    policy = Exponential(base_ms=250, cap_ms=60_000)

    @app.task(max_attempts=2, backoff=policy)
    async def flaky(ctx: JobContext) -> None:
        raise RuntimeError(f"boom {ctx.attempt}")

    producer = Producer(client)
    queue = producer.queue(queue_name)
    keys = QueueKeys.of(queue_name)
    async with running_worker(settings(queue_name, redis_url), app) as worker:
        job = (await producer.enqueue(queue_name, "flaky")).job_id
        await until(lambda: worker.counters.dead_lettered == 1, what="two attempts, then dead")
        before = await server_ms(client)
        assert (await dead_letter.retry_dead(queue, [job])).done == 1
        await until(lambda: worker.counters.retried == 2, what="the retried job's failure")
        after = await server_ms(client)
        score = await client.zscore(keys.schedule, job)
    assert score is not None
    row = await queue.get_job(job)
    assert row is not None
    # Token 3 was the fence of its move to dead (no attempt ran on it): the retry ran token 4.
    assert (row["attempts"], row["last_error"]) == ("4", "RuntimeError: boom 4")
    assert before + 250 <= score <= after + 250


async def test_the_reaper_dead_letters_a_job_whose_lease_keeps_lapsing(
    client: Redis, queue_name: str
) -> None:
    max_attempts = 3
    producer = Producer(client)
    queue = producer.queue(queue_name)
    job = (await producer.enqueue(queue_name, "crashes_its_worker")).job_id
    for attempt in range(1, max_attempts + 1):
        claimed = await queue.claim(1, 30)
        assert [(j.id, j.token) for j in claimed.jobs] == [(job, attempt)]
        await anyio.sleep(0.06)  # the holder "crashed": let its 30 ms lease lapse
        reaped = await queue.reap(100, max_attempts)
        last = attempt == max_attempts
        assert (reaped.returned, reaped.dead) == ((0, 1) if last else (1, 0))
        assert await queue.state_of(job) == ("dead" if last else "pending")
    row = await queue.get_job(job)
    assert row is not None
    assert (row["state"], attempts_run(row["attempts"], row.get("fenced"))) == ("dead", 3)
    assert "lease expired" in row["last_error"]
    counts = await queue.counts()
    assert (counts.dead, counts.failed, counts.pending, counts.active) == (1, 1, 0, 0)
    assert not await client.exists(QueueKeys.of(queue_name).lock(job))


# ---- resilience and shutdown -------------------------------------------------------------------


async def test_a_script_flush_mid_run_is_recovered(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    seen: list[int] = []
    producer = Producer(client)
    async with running_worker(settings(queue_name, redis_url), recording_app(seen)) as worker:
        await producer.enqueue(queue_name, "record", {"n": 1})
        await until(lambda: worker.counters.completed == 1, what="the first job")
        await client.script_flush()
        claim_sha = Scripts().by_name["claim"].sha
        assert await client.script_exists(claim_sha) == [False]
        await producer.enqueue(queue_name, "record", {"n": 2})
        await until(lambda: worker.counters.completed == 2, what="the job after the flush")
    assert seen == [1, 2]
    assert (await producer.queue(queue_name).counts()).completed == 2


async def test_a_graceful_stop_hands_held_jobs_back_to_pending(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    started: list[int] = []
    app = App()

    @app.task
    async def long_job(ctx: JobContext, n: int) -> None:
        started.append(n)
        await anyio.sleep(30)

    producer = Producer(client)
    specs = [JobSpec("long_job", {"n": n}) for n in range(2)]
    ids = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    keys = QueueKeys.of(queue_name)
    with anyio.fail_after(10):  # a guard against a hang, not a bound
        async with (
            loop_lag() as lag,
            running_worker(settings(queue_name, redis_url, grace_ms=200), app) as worker,
        ):
            await until(lambda: sorted(started) == [0, 1], what="both jobs held")
            assert all([await client.exists(keys.lock(job)) for job in ids])
            stop_at = anyio.current_time()
        stopped_in = anyio.current_time() - stop_at
    queue = producer.queue(queue_name)
    assert worker.counters.released == 2
    assert [await queue.state_of(job) for job in ids] == ["pending", "pending"]
    rows = [await queue.get_job(job) for job in ids]
    assert [(r["state"], r["attempts"]) if r else None for r in rows] == [("pending", "1")] * 2
    assert [await client.exists(keys.lock(job)) for job in ids] == [0, 0]
    # The grace period, then the hand-back at once: a few awaits, each late by the loop lag.
    bound = 0.2 + 1.0 + 10 * lag.max_s
    story = f"stopped in {stopped_in:.3f} s; bound {bound:.3f} s (loop lag {lag.max_s:.3f} s)"
    assert 0.2 <= stopped_in < bound, f"waits out the grace period, then hands back: {story}"


async def test_a_re_sent_complete_answers_settled_and_counts_once(
    client: Redis, queue_name: str
) -> None:
    producer = Producer(client)
    queue = producer.queue(queue_name)
    job = (await producer.enqueue(queue_name, "once")).job_id
    claimed = (await queue.claim(1, 5_000)).jobs[0]
    held = HeldLease(claimed.id, claimed.token, claimed.nonce)
    first = await queue.complete(held, 60_000)
    second = await queue.complete(held, 60_000)
    assert first.status is SettleStatus.OK
    assert (second.status, second.detail) == (SettleStatus.SETTLED, "completed")
    assert (await queue.counts()).completed == 1
    assert await queue.state_of(job) == "absent"


async def test_hundreds_of_jobs_settling_at_once_wait_for_a_connection_instead_of_failing(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """More concurrent settles than pooled connections: they queue for one, none errors."""
    release = anyio.Event()
    app = App()

    @app.task
    async def held(ctx: JobContext) -> None:
        await release.wait()

    await Producer(client).enqueue_many(queue_name, [JobSpec("held") for _ in range(300)])
    with capture_logs() as logs:
        async with running_worker(settings(queue_name, redis_url, concurrency=300), app) as worker:
            await until(lambda: worker.counters.claimed == 300, what="300 jobs claimed")
            release.set()
            await until(lambda: worker.counters.completed == 300, what="300 completions")
    trouble = [e["event"] for e in logs if e["log_level"] in ("warning", "error")]
    assert trouble == []
    assert worker.counters.retried == 0
    assert (await Producer(client).queue(queue_name).counts()).completed == 300


async def test_every_job_transition_is_one_structured_event(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """Claimed, completed, retried, dead, and a lease reaped: each one event naming the queue,
    the job and its attempts (operators grep these)."""
    app = App()

    @app.task
    async def fine(ctx: JobContext) -> None:
        return None

    @app.task(max_attempts=2)
    async def broken(ctx: JobContext) -> None:
        raise RuntimeError("no")

    producer = Producer(client)
    ok = (await producer.enqueue(queue_name, "fine")).job_id
    bad = (await producer.enqueue(queue_name, "broken")).job_id
    lapsed = (await producer.enqueue(queue_name, "fine", delay_ms=60_000)).job_id
    await client.zadd(QueueKeys.of(queue_name).active, {lapsed: 0})  # a lease long expired
    await client.hset(QueueKeys.of(queue_name).job(lapsed), "state", "active")
    with capture_logs() as logs:
        async with running_worker(settings(queue_name, redis_url), app) as worker:
            await until(
                lambda: worker.counters.completed == 2 and worker.counters.dead_lettered == 1,
                what="two completions and a dead letter",
            )
    by_job: dict[str, list[str]] = {}
    for event in logs:
        if "job_id" in event and event["event"].startswith("job_"):
            assert event["queue"] == queue_name
            if event["event"] != "job_reaped":
                assert event["attempts"] >= 1
            by_job.setdefault(event["job_id"], []).append(event["event"])
    assert by_job[ok] == ["job_claimed", "job_completed"]
    assert by_job[bad] == ["job_claimed", "job_retried", "job_claimed", "job_dead"]
    assert by_job[lapsed] == ["job_reaped", "job_claimed", "job_completed"]


async def test_a_worker_announces_itself_while_it_runs_and_leaves_when_it_stops(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async with running_worker(settings(queue_name, redis_url, beat_ms=50), App()) as worker:
        entries = await eventually(lambda: live_workers(client, queue_name), what="announced")
        assert worker.presence is not None
        assert [e["id"] for e in entries] == [worker.presence.id]
        assert entries[0]["pid"] == os.getpid()
        assert entries[0]["queues"] == [queue_name]
    assert await live_workers(client, queue_name) == []


async def test_an_operator_cancels_a_running_job_through_the_renewal_sweep(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """`emq-worker cancel` only marks the job; the holder learns it from its next renewal (no
    extra round trip), stops the handler and settles the job dead, fenced like any write."""
    events: list[str] = []
    app = cancellable_app(events)

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "long_job")).job_id
    queue = producer.queue(queue_name)
    options = settings(queue_name, redis_url, lease_ms=900, renew_every_ms=100)
    async with running_worker(options, app) as worker:
        await until(lambda: events == ["started"], what="the job running")
        await verbs.cancel_job(queue, job)
        await until(lambda: worker.counters.dead_lettered == 1, what="the job settled dead")
    assert events == ["started", "cancelled"]
    row = await queue.get_job(job)
    assert row is not None
    assert (row["state"], row["last_error"]) == ("dead", "cancelled by an operator")
    assert await client.scard(queue.keys.cancel) == 0
    assert worker.counters.fenced == worker.counters.leases_lost == 0


async def test_a_parked_worker_learns_of_a_delayed_job_or_retry_and_runs_it_on_time(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """With a 5 s beat, a job enqueued for +300 ms while the worker is parked, and a retry
    scheduled 300 ms after a failure, each run about 300 ms later, not at the next beat."""
    started: list[int] = []
    app = App()

    @app.task(backoff=Fixed(300), max_attempts=2)
    async def flaky(ctx: JobContext) -> None:
        started.append(await server_ms(client))
        if ctx.attempt == 1:
            raise RuntimeError("first time fails")

    options = settings(queue_name, redis_url, beat_ms=5_000)
    async with running_worker(options, app) as worker:
        enqueued_at = await server_ms(client)
        await Producer(client).enqueue(queue_name, "flaky", delay_ms=300)
        await until(lambda: worker.counters.completed == 1, what="the retry completed", within=4)
    first, second = started
    assert 300 <= first - enqueued_at < 1_500
    assert 300 <= second - first < 1_500
