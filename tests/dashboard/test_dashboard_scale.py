"""Every page of the dashboard costs under 300 ms (median of five renders) with 100 000 jobs
pending and 10 000 dead (the issue's bar, "with a busy core beside it"), because every read is
bounded: a page of a sorted set by index, a page of rows, one pipeline per page of queues;
never a whole set, never KEYS.

The jobs are written straight into the keyspace (the three-field row and the set member, in
pipelines of 5 000): the same keys as the enqueue script writes, at a fraction of its cost. Each
page is rendered in-process (the ASGI app over httpx: routing, Redis reads, rendering), each
render paying the queue SCAN the dashboard otherwise reuses for 5 s. What a render costs is the
CPU it takes in this process and in the server (its INFO cpu): with one core busy beside, that
is its wall time on the other. The wall time is printed beside it (`-s` shows the table), with
a CPU busy-loop running, but not asserted: on a shared machine it measures the machine's load
(at load 18 on 2 cores the same renders took up to 370 ms of wall time, 10-80 ms of CPU)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager

import pytest
from redis.asyncio import Redis

from emq_worker import FlowJob, Producer
from emq_worker.dashboard import queues
from emq_worker.jobs import codec
from emq_worker.jobs.results import encode_result
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.keys import QUEUES_KEY, QueueKeys
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion
from emq_worker.runtime.history_flush import HistoryRecorder
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.presence import Presence, WorkerRegistry
from tests.dashboard.test_dashboard_http import browsing, lease_of

pytestmark = pytest.mark.fault
PENDING = 100_000
DEAD = 10_000
BATCH = 5_000
BUDGET_MS = 300.0
TRIES = 5
LANES = 10
IN_LANE = 100


async def fill(client: Redis, keys: QueueKeys, ids: Sequence[str], state: str, key: str) -> None:
    payload = codec.encode("charge", {"order": "A-1", "amount": 1200})
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        async with client.pipeline(transaction=False) as pipe:
            for job_id in chunk:
                attempts = "0" if state == "pending" else "3"
                row = keys.job(job_id)
                pipe.hset(row, mapping={"state": state, "attempts": attempts, "payload": payload})
                if state == "dead":
                    pipe.hset(row, "last_error", "ValueError: card declined")
            pipe.zadd(key, dict.fromkeys(chunk, 0))
            await pipe.execute()


async def drop(client: Redis, keys: QueueKeys, ids: Sequence[str]) -> None:
    for start in range(0, len(ids), BATCH):
        await client.delete(*(keys.job(job_id) for job_id in ids[start : start + BATCH]))


async def in_lanes(client: Redis, keys: QueueKeys) -> None:
    """LANES lanes of IN_LANE jobs each, on the ring (as grouped enqueues leave them)."""
    minter = SnowflakeMinter(1004)
    for n in range(LANES):
        group = f"tenant-{n}"
        await fill(client, keys, minter.job_ids(IN_LANE), "pending", keys.lane(group))
        await client.rpush(f"{keys.prefix}ring", group)


async def server_cpu_s(client: Redis) -> float:
    """CPU seconds the server has used so far (its own and its children's are not apart)."""
    cpu = await client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


@contextmanager
def busy_core() -> Iterator[None]:
    """A CPU busy-loop in a process of its own beside the dashboard, for as long as it lasts."""
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        loop.kill()
        loop.wait()


@pytest.fixture
async def crowded(client: Redis, queue_name: str) -> AsyncIterator[tuple[Queue, list[str]]]:
    queue = Queue(client, Scripts(), queue_name)
    keys = queue.keys
    minter = SnowflakeMinter(1001)
    pending, dead = minter.job_ids(PENDING), minter.job_ids(DEAD)
    try:
        await fill(client, keys, pending, "pending", keys.pending)
        await fill(client, keys, dead, "dead", keys.dead)
        yield queue, [*pending[:1], *dead[:1]]
    finally:
        await drop(client, keys, [*pending, *dead])
        await client.delete(keys.pending, keys.dead, keys.active)
        await client.zrem(QUEUES_KEY, queue_name)


async def test_every_page_renders_in_under_300_ms_with_100k_pending_and_10k_dead(
    client: Redis,
    redis_url: str,
    crowded: tuple[Queue, list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queues, "SCAN_REUSE_S", -1.0)  # every render pays its queue SCAN
    queue, (a_pending, a_dead) = crowded
    q = queue.name
    held = (await queue.claim(50, 30_000)).jobs  # and a few leases, with a worker holding them
    done, *retried = held[-3:]  # one completes with a result, two fail and are scheduled again
    held = held[:-3]
    stored, _ = encode_result({"receipt": "R-1", "charged": 1200})
    await queue.settle([Completion(lease_of(done), stored, 60_000)], 1000)
    for job in retried:
        await queue.fail(lease_of(job), 1000, delay_ms=600_000, max_attempts=5, error="declined")
    producer = Producer(client)
    parents = [
        (await producer.enqueue_flow(q, FlowJob("ship", children=[FlowJob("pack")]))).job_id
        for _ in range(3)
    ]
    await in_lanes(client, queue.keys)
    registry = WorkerRegistry(client, [q], concurrency=50, beat_ms=1000, lease_ms=30_000)
    leases = [Lease(job=job, confirmed_at=10.0) for job in held]
    await registry.beat(Presence(len(leases), 0, len(leases), {q: leases}, 12.0))
    counters = Counters()
    for n, job in enumerate(held):
        counters.settled(q, "charge", "completed", 0.01 * (n + 1), (job.id, 1))
    recorder = HistoryRecorder(counters, registry.id, 1000)
    await recorder.flush([queue], 0.0)
    await recorder.name_queues([queue])  # as every worker does: found without a whole SCAN
    last_pending = PENDING // 50 - 1  # the page count shifts as 50 left pending
    paths = [
        "/",
        "/fragments/queues",
        "/api/queues",
        "/api/sparks",
        "/api/history?range=1h",
        f"/queues/{q}",
        f"/fragments/queues/{q}",
        f"/api/queues/{q}/leases",
        f"/api/history?range=24h&queue={q}",
        f"/api/history?range=14d&queue={q}",
        f"/queues/{q}/pending",
        f"/queues/{q}/pending?page={last_pending}&order=newest",
        f"/queues/{q}/pending?filter=a-1",  # the payload filter: 2 000 looked at, all match
        f"/queues/{q}/pending?filter=nowhere&order=newest",  # 2 000 looked at, none match
        f"/queues/{q}/scheduled",
        f"/queues/{q}/active",
        f"/queues/{q}/dead",
        f"/queues/{q}/dead?page=200",
        f"/queues/{q}/completed",
        f"/api/queues/{q}/jobs?state=pending&page=1000",
        f"/api/queues/{q}/dead?limit=1000",
        f"/queues/{q}/jobs/{a_pending}",
        f"/queues/{q}/jobs/{a_dead}",
        f"/queues/{q}/jobs/{held[0].id}",
        "/workers",
        "/tasks",
        "/api/tasks?range=14d",
        f"/search?id={a_dead}",
        f"/search?id={a_pending}",
        f"/queues/{q}/retries",
        f"/api/queues/{q}/jobs?state=retries",
        f"/queues/{q}/waiting",
        f"/api/queues/{q}/jobs?state=waiting",
        f"/queues/{q}/jobs/{parents[0]}",
        f"/queues/{q}/jobs/{done.id}",
        f"/api/queues/{q}/jobs/{done.id}",
        f"/queues/{q}/pending?page={last_pending + LANES * IN_LANE // 50}",
        f"/api/queues/{q}/jobs?state=pending&order=newest",
    ]
    walls: dict[str, float] = {}
    costs: dict[str, float] = {}
    with busy_core():
        async with browsing(client, redis_url, allow_actions=True) as http:
            for path in paths:
                wall, cost = [], []
                for _ in range(TRIES):
                    server = await server_cpu_s(client)
                    started, cpu = time.perf_counter(), time.process_time()
                    response = await http.get(path)
                    wall.append((time.perf_counter() - started) * 1000)
                    cost.append((time.process_time() - cpu) * 1000)
                    cost[-1] += (await server_cpu_s(client) - server) * 1000
                    assert response.status_code in (200, 303), (path, response.text[-300:])
                walls[path], costs[path] = statistics.median(wall), statistics.median(cost)
    print(f"\npages (median of {TRIES}), 100k pending + 10k dead, a core busy: cpu, wall ms")
    for path in paths:
        print(f"  {costs[path]:7.1f} {walls[path]:7.1f}  {path.replace(q, 'Q')}")
    slow = {path: round(ms, 1) for path, ms in costs.items() if ms >= BUDGET_MS}
    assert slow == {}, slow
    assert (await queue.counts()).pending == PENDING - 50 + len(parents)  # a child each
