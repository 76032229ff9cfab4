"""A queue whose settles cannot be written holds back no other queue's settles.

The settle batcher retries a queue's batch through connection trouble for up to the settle
timeout (a cluster node lost until its replica leads: seconds). Meanwhile another queue's
finished jobs must still be written at once: their leases stay held and renewed until then, and
a stop waits for them. Here one queue's node is "lost" (its settle raises a connection error
until the test lets it through) while the other queue's server answers.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import anyio
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from emq_worker import JobSpec, Producer, WorkerSettings
from emq_worker.observe.clock import MonotonicClock
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import SettleResult
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion, Outcome
from emq_worker.runtime.lease import Lease, LeaseBook
from emq_worker.runtime.settle import SettleBatcher
from emq_worker.runtime.state import StopSignal, WorkerState
from tests.support.wait import eventually

LEASE_MS = 30_000
SETTLE_TIMEOUT_MS = 60_000
"""Longer than any wait here: the lost queue's batch is still retrying when the test ends."""


class LostNodeQueue(Queue):
    """A queue on a node that cannot be reached: every settle fails as a lost connection would,
    until `reachable` is set."""

    def __init__(self, client: Redis, scripts: Scripts, name: str) -> None:
        super().__init__(client, scripts, name)
        self.reachable = anyio.Event()
        self.attempts = 0

    async def settle(
        self, outcomes: Sequence[Outcome], receipt_ms: int, completed_ttl_ms: int = 0
    ) -> list[SettleResult]:
        if not self.reachable.is_set():
            self.attempts += 1
            raise RedisConnectionError("Error 111 connecting: Connection refused.")
        return await super().settle(outcomes, receipt_ms, completed_ttl_ms)


async def claim_one(queue: Queue, book: LeaseBook) -> Lease:
    await Producer(queue.client).enqueue_many(queue.name, [JobSpec("work")])
    [job] = (await queue.claim(1, LEASE_MS)).jobs
    lease = Lease(job=job, confirmed_at=MonotonicClock().monotonic())
    book.add(lease)
    return lease


async def test_a_queue_whose_settles_fail_holds_back_no_other_queues_settle(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    lost = LostNodeQueue(client, scripts, f"{queue_name}.lost")
    healthy = Queue(client, scripts, f"{queue_name}.healthy")
    book = LeaseBook()
    settings = WorkerSettings(
        queues=(lost.name, healthy.name), lease_ms=LEASE_MS, settle_timeout_ms=SETTLE_TIMEOUT_MS
    )
    queues = {lost.name: lost, healthy.name: healthy}
    state = WorkerState(
        settings, queues, Counters(), MonotonicClock(), random.Random(0), StopSignal(), book
    )
    batcher = SettleBatcher(state)
    stuck, written = await claim_one(lost, book), await claim_one(healthy, book)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(batcher.run)
        batcher.submit(stuck, Completion(stuck.held), "work")

        async def retrying() -> bool:
            return lost.attempts >= 2

        await eventually(retrying, what="the lost queue's settle retried")
        batcher.submit(written, Completion(written.held), "work")

        async def healthy_settled() -> bool:
            return not book.holds(written)

        await eventually(healthy_settled, what="the healthy queue's settle written")
        assert (await healthy.counts()).active == 0
        assert book.holds(stuck), "the lost queue's settle was written while its node was lost"

        lost.reachable.set()

        async def lost_settled() -> bool:
            return not book.holds(stuck)

        await eventually(lost_settled, what="the lost queue's settle once its node is back")
        tasks.cancel_scope.cancel()
    assert (await lost.counts()).active == 0
