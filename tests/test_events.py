"""Lifecycle events on `emq:{q}:events`: published by the scripts only while someone listens, in
one JSON shape, read through `emq_worker.jobs.events` and `emq-worker events`."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.jobs.events import Event, EventStream, channel, open_events, parse_event, subscribe
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Failure, HeldLease
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

LEASE_MS = 30_000
RECEIPT_MS = 60_000
EMQ_WORKER = Path(sys.executable).parent / "emq-worker"


async def next_events(stream: EventStream, n: int) -> list[Event]:
    seen: list[Event] = []
    with anyio.fail_after(10):
        async for event in stream:
            seen.append(event)
            if len(seen) == n:
                break
    return seen


async def publish_calls(client: Redis) -> int:
    stats = await client.info("commandstats")
    entry: dict[str, Any] = stats.get("cmdstat_publish", {})
    return int(entry.get("calls", 0))


async def server_now_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_claim_and_settle_publish_each_transition_in_one_shape(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    producer = Producer(client)
    done = (await producer.enqueue(queue_name, "charge")).job_id
    retried = (await producer.enqueue(queue_name, "charge")).job_id
    async with open_events(client, queue_name) as stream:
        before = await server_now_ms(client)
        claimed = (await queue.claim(2, LEASE_MS)).jobs
        first, second = (HeldLease(job.id, job.token, job.nonce) for job in claimed)
        await queue.settle([Failure(second, 0, 3, "boom")], RECEIPT_MS)
        await queue.complete(first, RECEIPT_MS)
        events = await next_events(stream, 5)
        after = await server_now_ms(client)

    assert [(e.event, e.job_id, e.attempts) for e in events] == [
        ("claimed", done, 1),
        ("claimed", retried, 1),
        ("retried", retried, 1),
        ("failed", retried, 1),  # the old name of retried, published too
        ("completed", done, 1),
    ]
    for event in events:
        assert event.queue == queue_name
        assert event.at_ms is not None
        assert before <= event.at_ms <= after
    assert events[2].data["outcome"] == "pending"
    assert events[2].data["error"] == "boom"
    assert {**events[3].data, "event": "retried"} == events[2].data
    assert set(events[4].data) == {"event", "queue", "job_id", "job", "attempts", "at_ms"}


async def test_dead_reaped_and_fenced_events(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    producer = Producer(client)
    doomed = (await producer.enqueue(queue_name, "charge")).job_id
    async with open_events(client, queue_name) as stream:
        [job] = (await queue.claim(1, LEASE_MS)).jobs
        lease = HeldLease(job.id, job.token, job.nonce)
        await queue.settle([Failure(lease, 0, 1, "gave up")], RECEIPT_MS)
        stale = await queue.complete(lease, RECEIPT_MS)  # a receipt answers: no event
        assert stale.status == "settled"
        [_, dead] = await next_events(stream, 2)
        assert (dead.event, dead.job_id, dead.data["outcome"], dead.data["error"]) == (
            "dead",
            doomed,
            "dead",
            "gave up",
        )

        lapsing = (await producer.enqueue(queue_name, "charge")).job_id
        [held] = (await queue.claim(1, 30)).jobs  # a 30 ms lease, left to lapse
        assert held.id == lapsing

        async def reaped() -> int:
            return (await queue.reap(10, 5)).returned

        await eventually(reaped, what="the lapsed lease reaped")
        [_, back] = await next_events(stream, 2)
        assert (back.event, back.job_id, back.attempts, back.data["outcome"]) == (
            "reaped",
            lapsing,
            1,
            "pending",
        )

        [again] = (await queue.claim(1, LEASE_MS)).jobs  # attempt 2 takes the job over
        late = HeldLease(held.id, held.token, held.nonce)
        assert [lost.id for lost in await queue.renew([late], LEASE_MS)] == [lapsing]
        refused = await queue.complete(late, RECEIPT_MS)
        assert refused.status == "stale"
        [_, renew_fenced, settle_fenced] = await next_events(stream, 3)
    assert (renew_fenced.event, renew_fenced.attempts, renew_fenced.data["outcome"]) == (
        "fenced",
        1,
        "renew",
    )
    assert renew_fenced.data["current"] == str(again.token)
    assert (settle_fenced.event, settle_fenced.job_id, settle_fenced.data["outcome"]) == (
        "fenced",
        lapsing,
        "stale",
    )


async def test_nothing_is_published_while_nobody_listens(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    await Producer(client).enqueue(queue_name, "charge")
    before = await publish_calls(client)
    [job] = (await queue.claim(1, LEASE_MS)).jobs
    await queue.complete(HeldLease(job.id, job.token, job.nonce), RECEIPT_MS)
    assert await publish_calls(client) == before

    await Producer(client).enqueue(queue_name, "charge")
    async with open_events(client, queue_name):
        [job] = (await queue.claim(1, LEASE_MS)).jobs
        await queue.complete(HeldLease(job.id, job.token, job.nonce), RECEIPT_MS)
    assert await publish_calls(client) == before + 2


async def test_an_application_iterates_a_running_worker_s_events(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()

    @app.task
    async def hello(ctx: JobContext) -> None:
        pass

    seen: list[str] = []
    completed = anyio.Event()

    async def watch(stream: AsyncIterator[Event]) -> None:
        async for event in stream:
            seen.append(event.event)
            if event.event == "completed":
                completed.set()
                return

    await Producer(client).enqueue(queue_name, "hello")
    async with anyio.create_task_group() as group:
        group.start_soon(watch, subscribe(client, queue_name))
        await eventually(lambda: listening(client, queue_name), what="the subscription")
        async with running_worker(worker_settings(queue_name, redis_url), app):
            with anyio.fail_after(10):
                await completed.wait()
    assert seen == ["claimed", "completed"]


async def listening(client: Redis, queue: str) -> bool:
    counts = await client.pubsub_numsub(channel(queue))
    return int(counts[0][1]) > 0


def test_echomq_s_own_event_shape_parses() -> None:
    event = parse_event(b'{"event":"progress","job":"JOB0000000000a","progress":"50"}')
    assert event is not None
    assert (event.event, event.job_id, event.attempts, event.data["progress"]) == (
        "progress",
        "JOB0000000000a",
        None,
        "50",
    )
    assert parse_event(b"not json") is None
    assert parse_event(b'["event"]') is None


async def test_the_events_command_prints_one_json_object_per_line(
    client: Redis, scripts: Scripts, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    job = (await Producer(client).enqueue(queue_name, "charge")).job_id
    command = [str(EMQ_WORKER), "events", "--queue", queue_name, "--count", "2"]
    async with await anyio.open_process([*command, "--redis-url", redis_url]) as tail:
        await eventually(
            lambda: listening(client, queue_name), timeout=30, what="emq-worker events"
        )
        [claimed] = (await queue.claim(1, LEASE_MS)).jobs
        await queue.complete(HeldLease(claimed.id, claimed.token, claimed.nonce), RECEIPT_MS)
        assert tail.stdout is not None
        out = b""
        with anyio.fail_after(30):
            async for chunk in tail.stdout:
                out += chunk
            assert await tail.wait() == 0
    events = [parse_event(line) for line in out.decode().splitlines()]
    assert [(e.event, e.job_id) for e in events if e is not None] == [
        ("claimed", job),
        ("completed", job),
    ]
