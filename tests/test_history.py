"""The history on the server: a worker's beat adds its counts to per-queue minute and hour
buckets (server clock) and its settled jobs to the settled log; flushes of several workers add
up, a refused flush is sent again whole, and every key expires by itself."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker import App, JobContext, Producer
from emq_worker.admin.whole_queue import obliterate_queue
from emq_worker.observe.history_format import (
    HOUR_MS,
    HOURS_KEPT_MS,
    MINUTE_MS,
    MINUTES_KEPT_MS,
    SETTLED_KEEP_MS,
    Stats,
    bucket_starts,
    duration_bucket,
    parse_bucket,
    percentile,
    total,
)
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.keys import QUEUES_KEY, QueueKeys
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.servertime import server_ms
from emq_worker.runtime.history_flush import HistoryRecorder
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


async def recent_buckets(client: Redis, queue: str, width_ms: int, count: int = 2) -> Stats:
    """The sum of the last `count` buckets (a flush may straddle a minute's end)."""
    keys = QueueKeys.of(queue)
    now = await server_ms(client, keys.pending)
    build = keys.history_minute if width_ms == MINUTE_MS else keys.history_hour
    async with client.pipeline(transaction=False) as pipe:
        for start in bucket_starts(now, width_ms, count):
            pipe.hgetall(build(start))
        replies = await pipe.execute()
    return total(parse_bucket(raw)[0] for raw in replies)


async def task_stats(client: Redis, queue: str) -> dict[str, Stats]:
    keys = QueueKeys.of(queue)
    now = await server_ms(client, keys.pending)
    tasks: dict[str, Stats] = {}
    for start in bucket_starts(now, HOUR_MS, 2):
        for name, stats in parse_bucket(await client.hgetall(keys.history_hour(start)))[1].items():
            tasks.setdefault(name, Stats()).add(stats)
    return tasks


def mixed_app() -> App:
    app = App()

    @app.task
    async def ok(ctx: JobContext) -> None:
        return None

    @app.task(max_attempts=2)
    async def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise ValueError("first try fails")

    @app.task(max_attempts=1)
    async def doomed(ctx: JobContext) -> None:
        raise RuntimeError("never works")

    return app


async def test_a_worker_adds_its_counts_to_the_buckets_and_its_jobs_to_the_settled_log(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    for task in ("ok", "ok", "ok", "flaky", "doomed"):
        await producer.enqueue(queue_name, task)
    settings = worker_settings(queue_name, redis_url, history_every_ms=100)
    async with running_worker(settings, mixed_app()) as worker:

        async def flushed() -> bool:
            stats = await recent_buckets(client, queue_name, MINUTE_MS)
            return stats.counts["completed"] == 4 and stats.counts["dead"] == 1

        await eventually(flushed, what="the history flush")
        worker_id = worker.presence.id if worker.presence else ""
    minute = await recent_buckets(client, queue_name, MINUTE_MS)
    hour = await recent_buckets(client, queue_name, HOUR_MS)
    for stats in (minute, hour):
        assert stats.counts == {"completed": 4, "retried": 1, "dead": 1, "reaped": 0, "claims": 6}
        assert stats.dur_count == 6
        assert sum(stats.histogram.values()) == 6
        assert stats.failure_rate == round(2 / 6, 4)
    tasks = await task_stats(client, queue_name)
    assert tasks["ok"].counts["completed"] == 3
    assert (tasks["flaky"].counts["retried"], tasks["flaky"].counts["completed"]) == (1, 1)
    assert tasks["doomed"].counts["dead"] == 1
    assert tasks["doomed"].failure_rate == 1.0

    keys = QueueKeys.of(queue_name)
    now = await server_ms(client, keys.pending)
    entries = [json.loads(e) for e in await client.lrange(keys.settled_log, 0, -1)]
    assert len(entries) == 6
    assert {e["worker"] for e in entries} == {worker_id}
    assert all(now - 60_000 < e["at_ms"] <= now for e in entries)
    assert [e["at_ms"] for e in entries] == sorted((e["at_ms"] for e in entries), reverse=True)
    [dead] = [e for e in entries if e["outcome"] == "dead"]
    assert (dead["task"], dead["attempt"], dead["error"]) == (
        "doomed",
        1,
        "RuntimeError: never works",
    )
    assert await client.zscore(QUEUES_KEY, queue_name) is not None
    await expires_by_itself(client, queue_name, now)


async def expires_by_itself(client: Redis, queue: str, now: int) -> None:
    keys = QueueKeys.of(queue)
    minute, hour = now - now % MINUTE_MS, now - now % HOUR_MS
    minute_ttl = await client.pttl(keys.history_minute(minute))
    if minute_ttl == -2:  # the last flush went into the previous minute
        minute -= MINUTE_MS
        minute_ttl = await client.pttl(keys.history_minute(minute))
    assert MINUTES_KEPT_MS - MINUTE_MS < minute_ttl <= MINUTES_KEPT_MS + MINUTE_MS
    hour_ttl = await client.pttl(keys.history_hour(hour))
    if hour_ttl == -2:
        hour_ttl = await client.pttl(keys.history_hour(hour - HOUR_MS))
    assert HOURS_KEPT_MS - HOUR_MS < hour_ttl <= HOURS_KEPT_MS + HOUR_MS
    assert 0 < await client.pttl(keys.settled_log) <= SETTLED_KEEP_MS
    assert await client.pttl(QUEUES_KEY) > 0


def counters_with(queue: str, completed: int, seconds: float) -> Counters:
    counters = Counters()
    for n in range(completed):
        counters.settled(queue, "charge", "completed", seconds, (f"JOB{n:011d}", 1))
    counters.by_queue[(queue, "claimed")] += completed
    return counters


async def test_two_workers_add_up_and_a_refused_flush_is_sent_again_whole(
    client: Redis, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    first = counters_with(queue_name, 3, 0.01)
    second = counters_with(queue_name, 2, 0.02)
    await HistoryRecorder(second, "w2", 1000).flush([queue], 0.0)
    await client.set(queue.keys.settled_log, "someone else's")  # the flush must refuse whole
    recorder = HistoryRecorder(first, "w1", 1000)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await recorder.flush([queue], 0.0)
    stats = await recent_buckets(client, queue_name, MINUTE_MS)
    assert (stats.counts["completed"], stats.counts["claims"]) == (2, 2)  # only the second's
    await client.delete(queue.keys.settled_log)
    first.settled(queue_name, "charge", "completed", 0.01, ("JOB00000000099", 1))
    await recorder.flush([queue], 0.0)
    await recorder.flush([queue], 0.0)  # nothing new: nothing counted twice
    stats = await recent_buckets(client, queue_name, MINUTE_MS)
    assert (stats.counts["completed"], stats.counts["claims"]) == (6, 5)
    assert stats.dur_count == 6
    assert stats.mean_ms == pytest.approx((4 * 10 + 2 * 20) / 6, rel=0.01)
    # The settled jobs of the refused flush were dropped (a sample); the later one is there.
    assert await client.llen(queue.keys.settled_log) == 1


def test_percentiles_read_from_the_histogram_are_within_a_bucket_of_the_truth() -> None:
    rng = random.Random(7)
    runs = sorted(rng.lognormvariate(-3, 1.2) for _ in range(5000))  # seconds
    histogram: dict[int, int] = {}
    for seconds in runs:
        histogram[duration_bucket(seconds)] = histogram.get(duration_bucket(seconds), 0) + 1
    for fraction in (0.5, 0.95, 0.99):
        truth = runs[int(fraction * len(runs)) - 1] * 1000
        found = percentile(histogram, fraction)
        assert found is not None
        assert truth / 1.26 <= found <= truth * 1.26, (fraction, truth, found)
    assert percentile({}, 0.5) is None
    assert duration_bucket(0.0) == -30
    assert duration_bucket(10**6) == 80
    assert duration_bucket(0.001) == 0  # 1 ms is the top of bucket 0


def test_a_bucket_parses_queue_and_task_fields_and_ignores_strangers() -> None:
    raw: dict[Any, Any] = {
        b"completed": b"5",
        b"dur:3": b"2",
        b"t:a:b:completed": b"4",
        b"t:a:b:dur:-2": b"1",
        b"t:x:dead": b"1",
        b"someone": b"else",
        b"dead": b"not a number",
    }
    queue, tasks = parse_bucket(raw)
    assert queue.counts["completed"] == 5
    assert queue.counts["dead"] == 0
    assert queue.histogram == {3: 2}
    assert set(tasks) == {"a:b", "x"}
    assert tasks["a:b"].counts["completed"] == 4
    assert tasks["a:b"].histogram == {-2: 1}


async def test_obliterate_forgets_the_queue_and_its_history(client: Redis, queue_name: str) -> None:
    queue = Queue(client, Scripts(), queue_name)
    recorder = HistoryRecorder(counters_with(queue_name, 2, 0.01), "w1", 1000)
    await recorder.flush([queue], 0.0)
    await recorder.name_queues([queue])
    assert await client.zscore(QUEUES_KEY, queue_name) is not None
    await queue.pause()
    await obliterate_queue(queue)
    assert await client.zscore(QUEUES_KEY, queue_name) is None
    assert await client.exists(queue.keys.settled_log) == 0
    assert (await recent_buckets(client, queue_name, MINUTE_MS)).settled == 0
