"""A re-sent enqueue recognises itself: the client that lost the first reply sends the very same
script call again (redis-py re-sends on a dropped connection; a cluster client after a MOVED
re-map or CLUSTERDOWN), and the second copy must answer as the first did, writing nothing, even
when the first copy's jobs have completed meanwhile. Never a second job, never a re-mint."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from emq_worker.jobs.producer import Enqueued, JobSpec, Producer
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import ArgValue, Scripts
from emq_worker.protocol.values import NewJob
from tests.support.conformance import LEASE_MS, RECEIPT_MS, Harness, held

Between = Callable[[], Awaitable[None]]


class LostFirstReply(Scripts):
    """Runs the first `enqueue` call twice, exactly as sent, and returns only the second reply:
    the first reply was lost on the way back. `between` runs after the first copy (a worker
    completing the jobs before the re-send arrives)."""

    def __init__(self, between: Between | None = None) -> None:
        super().__init__()
        self.between = between
        self.resends = 1
        self.first_reply: Any = None

    async def call(
        self, client: Redis, name: str, keys: Sequence[str], args: Sequence[ArgValue]
    ) -> Any:
        if name != "enqueue" or self.resends == 0:
            return await super().call(client, name, keys, args)
        self.resends -= 1
        self.first_reply = await super().call(client, name, keys, args)
        if self.between is not None:
            await self.between()
        return await super().call(client, name, keys, args)


class DroppedFirstReply(LostFirstReply):
    """The first `enqueue` call runs, and its caller gets a dropped connection instead of the
    reply: what the Producer itself then does is under test."""

    async def call(
        self, client: Redis, name: str, keys: Sequence[str], args: Sequence[ArgValue]
    ) -> Any:
        if name != "enqueue" or self.resends == 0:
            return await Scripts.call(self, client, name, keys, args)
        self.resends -= 1
        self.first_reply = await Scripts.call(self, client, name, keys, args)
        if self.between is not None:
            await self.between()
        raise RedisConnectionError("Connection closed by server.")


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


def resending(conf: Harness, between: Between | None = None) -> tuple[Producer, LostFirstReply]:
    producer = Producer(conf.client)
    scripts = LostFirstReply(between)
    producer.scripts = scripts
    return producer, scripts


def complete_all(conf: Harness, count: int) -> Between:
    async def run() -> None:
        jobs = await conf.claim(count)
        assert len(jobs) == count
        for job in jobs:
            assert (await conf.queue.complete(held(job), RECEIPT_MS)).status == "ok"

    return run


async def test_a_re_sent_burst_of_minted_ids_enqueues_each_job_once(conf: Harness) -> None:
    producer, _ = resending(conf)
    results = await producer.enqueue_many(conf.queue.name, [JobSpec("work") for _ in range(5)])
    assert [r.duplicate for r in results] == [False] * 5
    assert (await conf.queue.counts()).pending == 5
    assert sorted(await conf.members(conf.keys.pending)) == sorted(r.job_id for r in results)


async def test_a_re_send_after_the_jobs_completed_runs_none_again(conf: Harness) -> None:
    producer, _ = resending(conf, complete_all(conf, 3))
    results = await producer.enqueue_many(conf.queue.name, [JobSpec("work") for _ in range(3)])
    assert [r.duplicate for r in results] == [False] * 3
    counts = await conf.queue.counts()
    assert (counts.pending, counts.active, counts.completed) == (0, 0, 3)
    for result in results:
        assert not await conf.exists(conf.keys.job(result.job_id))


async def test_a_re_sent_caller_chosen_id_that_completed_is_still_reported_enqueued(
    conf: Harness,
) -> None:
    chosen = conf.mint()
    producer, _ = resending(conf, complete_all(conf, 1))
    result = await producer.enqueue(conf.queue.name, "work", job_id=chosen)
    assert result == Enqueued(chosen, False)  # the first copy enqueued it: this call did
    counts = await conf.queue.counts()
    assert (counts.pending, counts.completed) == (0, 1)


async def test_the_re_send_answers_exactly_as_the_first_copy_did(conf: Harness) -> None:
    """At the script: a new job (1), an existing id (0), and a job parked under a dedup id
    (its id); the re-send replays all three and writes nothing."""
    taken = await conf.enqueue(b"old")
    holder = await conf.producer.enqueue_raw(conf.queue.name, b"held", dedup_id="k")
    scripts = LostFirstReply(complete_all(conf, 1))
    queue = Queue(conf.client, scripts, conf.queue.name)
    fresh = conf.mint()
    jobs = [
        NewJob(fresh, b"new"),
        NewJob(taken, b"again"),
        NewJob(conf.mint(), b"deduped", dedup_id="k"),
    ]
    await conf.client.zrem(conf.keys.pending, taken, holder.job_id)  # only `fresh` to claim
    reply = await queue.enqueue(jobs)
    assert reply == [True, False, JobId(holder.job_id)]
    assert [_flag(x) for x in scripts.first_reply] == [_flag(x) for x in reply]
    assert not await conf.exists(conf.keys.job(fresh))  # it completed; not written again


async def test_a_collision_with_another_producers_id_still_mints_anew(conf: Harness) -> None:
    """Without a re-send, a 0 for a minted id is another producer's row (same node id)."""
    other = await conf.enqueue(b"theirs")
    producer = Producer(conf.client)
    producer.minter = _FirstMintTaken(other)
    result = await producer.enqueue_raw(conf.queue.name, b"mine")
    assert result.job_id != other
    assert not result.duplicate
    assert await conf.field(result.job_id, "payload") == b"mine"
    assert await conf.field(other, "payload") == b"theirs"


async def test_the_lease_of_a_re_sent_enqueue_is_untouched(conf: Harness) -> None:
    """A re-send that arrives while the first copy's job runs changes nothing about it."""

    async def claim() -> None:
        assert len(await conf.claim(1, LEASE_MS)) == 1

    producer, _ = resending(conf, claim)
    result = await producer.enqueue_raw(conf.queue.name, b"x")
    assert await conf.row(result.job_id) == {
        b"state": b"active",
        b"attempts": b"1",
        b"payload": b"x",
    }
    assert (await conf.queue.counts()).pending == 0


async def test_the_producer_re_sends_a_call_whose_reply_a_dropped_connection_took(
    conf: Harness,
) -> None:
    """The single-server client re-sends nothing itself: the Producer sends the same call
    again (same nonce), and the memo answers it, though the jobs completed meanwhile."""
    producer = Producer(conf.client)
    scripts = DroppedFirstReply(complete_all(conf, 3))
    producer.scripts = scripts
    results = await producer.enqueue_many(conf.queue.name, [JobSpec("work") for _ in range(3)])
    assert [r.duplicate for r in results] == [False] * 3
    assert scripts.resends == 0
    counts = await conf.queue.counts()
    assert (counts.pending, counts.active, counts.completed) == (0, 0, 3)


class _FirstMintTaken(SnowflakeMinter):
    def __init__(self, taken: JobId) -> None:
        super().__init__(1000)
        self.taken: JobId | None = taken

    def job_ids(self, n: int) -> list[JobId]:
        if self.taken is None:
            return super().job_ids(n)
        first, self.taken = self.taken, None
        return [first, *super().job_ids(n - 1)]


def _flag(value: Any) -> Any:
    """A raw reply entry or a Queue.enqueue result, as one comparable value."""
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, str) else int(value)
