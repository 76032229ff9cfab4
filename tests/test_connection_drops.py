"""Dropped connections cost nothing that can safely be re-sent.

An idle pooled connection the server dropped (`CLIENT KILL TYPE normal`, a proxy or a firewall
timing it out) is replaced before anything is sent on it; a renew, claim, settle, reap, promote or
enqueue whose reply was lost is re-sent once on a fresh connection (each is idempotent by
construction: renew by its token, claim by its memo, settle by its receipts, enqueue by its ids);
any other script is never re-sent. Each test drives its fault deterministically: kill, then call.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from typing import cast

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from emq_worker import JobSpec, Producer, WorkerSettings
from emq_worker.jobs.writes import append_log, read_log
from emq_worker.observe.clock import MonotonicClock
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, SettleStatus
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import RENEW_CHUNK, Completion, HeldLease
from emq_worker.runtime.lease import Lease, LeaseBook
from emq_worker.runtime.renewal import RenewalSweep
from emq_worker.runtime.state import StopSignal, WorkerState
from emq_worker.valkey.connection import connect
from tests.chaos.proxy import Proxy
from tests.chaos.rows import script_call_of
from tests.support.server import RedisServer

LEASE_MS = 30_000
RECEIPT_MS = 60_000


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of this module's own: `CLIENT KILL TYPE normal` reaches no other test's client."""
    with RedisServer(tmp_path_factory.mktemp("drops")) as server:
        yield server


@pytest.fixture
async def worker_client(own_server: RedisServer) -> AsyncIterator[Redis]:
    """A client built as the worker builds its own (the product's `connect`)."""
    client = connect(own_server.url, DEFAULT_WIRE_VERSION, socket_timeout_s=5)
    await Scripts().load_all(client)  # as the worker does at start: no NOSCRIPT round trip
    yield client
    await client.aclose()


@pytest.fixture
async def killer(own_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis(port=own_server.port)
    yield client
    await client.aclose()


async def kill_normal_clients(killer: Redis) -> int:
    """`CLIENT KILL TYPE normal` (SKIPME yes): every client connection but the killer's."""
    return int(await killer.client_kill_filter(_type="normal", skipme=True))


async def idle_connections(client: Redis, count: int) -> None:
    """Leave `count` connections idle in the client's pool (a burst used them, then rested)."""
    await asyncio.gather(*(client.ping() for _ in range(count)))


def held(job: ClaimedJob) -> HeldLease:
    return HeldLease(job.id, job.token, job.nonce)


async def claimed_one(producer: Producer, queue: Queue) -> ClaimedJob:
    await producer.enqueue(queue.name, "held")
    [job] = (await queue.claim(1, LEASE_MS)).jobs
    return job


async def test_a_renewal_tick_after_idle_connections_were_killed_renews(
    worker_client: Redis, killer: Redis, queue_name: str
) -> None:
    scripts = Scripts()
    queue = Queue(worker_client, scripts, queue_name)
    job = await claimed_one(Producer(worker_client), queue)
    clock = MonotonicClock()
    book = LeaseBook()
    lease = Lease(job=job, confirmed_at=clock.monotonic())
    book.add(lease)
    settings = WorkerSettings(queues=(queue_name,), lease_ms=LEASE_MS)
    queues = {queue_name: queue}
    stop = StopSignal()
    state = WorkerState(settings, queues, Counters(), clock, random.Random(0), stop, book)
    sweep = RenewalSweep(state)
    for _ in range(3):  # three failed ticks in a row self-fence (renew_every_ms = lease / 3)
        await idle_connections(worker_client, 3)
        assert await kill_normal_clients(killer) >= 3
        await sweep.tick()
        assert sweep.state.counters.renew_failures == 0
    assert sweep.state.counters.renew_sweeps == 3
    assert sweep.state.counters.self_fenced == 0
    assert book.holds(lease)
    assert not lease.lost


async def test_a_producers_first_enqueue_after_its_idle_connection_was_killed_succeeds(
    own_server: RedisServer, killer: Redis, queue_name: str
) -> None:
    producer = Producer.from_url(own_server.url)
    try:
        await producer.enqueue(queue_name, "warm-up")
        assert await kill_normal_clients(killer) >= 1
        [enqueued] = await producer.enqueue_many(queue_name, [JobSpec("after-kill")])
    finally:
        await producer.aclose()
    assert not enqueued.duplicate
    pending = cast(list[bytes], await killer.zrange(QueueKeys.of(queue_name).pending, 0, -1))
    assert pending.count(enqueued.job_id.encode()) == 1
    assert len(pending) == 2


async def test_a_claim_and_a_settle_after_idle_connections_were_killed_succeed(
    worker_client: Redis, killer: Redis, queue_name: str
) -> None:
    queue = Queue(worker_client, Scripts(), queue_name)
    producer = Producer(worker_client)
    await producer.enqueue(queue_name, "held")
    await idle_connections(worker_client, 3)
    assert await kill_normal_clients(killer) >= 3
    [job] = (await queue.claim(1, LEASE_MS)).jobs
    await idle_connections(worker_client, 3)
    assert await kill_normal_clients(killer) >= 3
    [result] = await queue.settle([Completion(held(job))], RECEIPT_MS)
    assert result.status == SettleStatus.OK
    assert (await queue.counts()).completed == 1


# --- replies lost in flight: only what is safe is re-sent ----------------------------------


@pytest.fixture
async def proxied(own_server: RedisServer) -> AsyncIterator[tuple[Proxy, Redis]]:
    async with Proxy(own_server.port) as proxy:
        client = connect(proxy.url, DEFAULT_WIRE_VERSION, socket_timeout_s=5)
        await Scripts().load_all(client)  # else the reply lost would be a NOSCRIPT
        try:
            yield proxy, client
        finally:
            await client.aclose()


async def test_renew_claim_and_settle_whose_reply_was_lost_are_resent_once(
    proxied: tuple[Proxy, Redis], queue_name: str
) -> None:
    proxy, client = proxied
    queue = Queue(client, Scripts(), queue_name)
    await Producer(client).enqueue(queue_name, "held")
    proxy.lose_replies(script_call_of("claim"), 1)
    [job] = (await queue.claim(1, LEASE_MS)).jobs  # the re-sent claim's memo replies the job
    proxy.lose_replies(script_call_of("renew"), 1)
    assert await queue.renew([held(job)], LEASE_MS) == []
    proxy.lose_replies(script_call_of("settle"), 1)
    [result] = await queue.settle([Completion(held(job))], RECEIPT_MS)
    assert proxy.replies_lost == 3
    assert result.status == SettleStatus.SETTLED  # the re-send found the first one's receipt
    counts = await queue.counts()
    assert (counts.pending, counts.active, counts.completed) == (0, 0, 1)


async def test_an_enqueue_whose_reply_was_lost_is_resent_and_counted_once(
    proxied: tuple[Proxy, Redis], queue_name: str
) -> None:
    proxy, client = proxied
    proxy.lose_replies(script_call_of("enqueue"), 1)
    [enqueued] = await Producer(client).enqueue_many(queue_name, [JobSpec("lost-reply")])
    assert proxy.replies_lost == 1
    assert not enqueued.duplicate  # the re-send found its own first sending's row
    pending = cast(list[bytes], await client.zrange(QueueKeys.of(queue_name).pending, 0, -1))
    assert pending == [enqueued.job_id.encode()]


async def test_a_script_that_is_not_idempotent_is_never_resent(
    proxied: tuple[Proxy, Redis], queue_name: str
) -> None:
    proxy, client = proxied
    queue = Queue(client, Scripts(), queue_name)
    job = await claimed_one(Producer(client), queue)
    proxy.lose_replies(script_call_of("joblog"), 1)
    with pytest.raises(RedisConnectionError):
        await append_log(queue, held(job), "one line")  # RPUSH: a re-send would add it twice
    assert proxy.replies_lost == 1
    assert await read_log(queue, job.id) == ["one line"]


async def test_a_pipelined_renewal_whose_reply_was_lost_is_resent_once(
    proxied: tuple[Proxy, Redis], queue_name: str
) -> None:
    proxy, client = proxied
    queue = Queue(client, Scripts(), queue_name)
    count = RENEW_CHUNK + 10  # two renew calls in one pipeline
    await Producer(client).enqueue_many(queue_name, [JobSpec("held")] * count)
    jobs = (await queue.claim(count, LEASE_MS)).jobs
    assert len(jobs) == count
    proxy.lose_replies(script_call_of("renew"), 1)
    assert await queue.renew([held(job) for job in jobs], LEASE_MS) == []
    assert proxy.replies_lost == 1
