"""Hand-off: a claim that empties pending leaves the worker's offer; the next enqueue leases its
job straight to that offer (no claim round trip); the next claim withdraws the offer and takes
over what was handed to it; a stop hands it back. Scripts on a real redis-server first, then
workers end to end."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, JobSpec, Producer, Worker
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimResult, SettleStatus, handed_off_job
from emq_worker.protocol.values import OfferTerms, new_nonce
from emq_worker.runtime.offers import OFFERS_PER_QUEUE, Offers
from tests.support.conformance import LEASE_MS, RECEIPT_MS, Harness, held
from tests.support.lag import loop_lag
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually, until

OFFER_MS = 5_000


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def offer(
    conf: Harness, nonce: str, *, count: int = 10, standing: bool = False, lease_ms: int = LEASE_MS
) -> ClaimResult:
    """A claim that may leave the offer `nonce` (and withdraws it first when `standing`)."""
    terms = OfferTerms(nonce, OFFER_MS, standing)
    return await conf.queue.claim(count, lease_ms, new_nonce(), terms)


async def handoff_items(conf: Harness, nonce: str) -> list[bytes]:
    return cast(list[bytes], await conf.client.lrange(conf.keys.handoff(nonce), 0, -1))


async def offers(conf: Harness) -> list[str]:
    return await conf.members(conf.keys.offers)


async def lapse_and_reap(conf: Harness, job_id: str) -> None:
    """The lease lapses (its deadline moved to the epoch, as time passing would: the hand-off
    list, PX lease_ms, is still there) and the reaper returns the job."""
    await conf.client.zadd(conf.keys.active, {job_id: 0}, xx=True)
    assert (await conf.queue.reap(10, 5)).returned == 1


async def server_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def wake_tokens(conf: Harness) -> int:
    return int(await conf.client.llen(conf.keys.wake))


# ---- scripts ---------------------------------------------------------------------------------


async def test_a_claim_that_empties_pending_leaves_an_offer(conf: Harness) -> None:
    await conf.enqueue(b"a")
    nonce = new_nonce()
    result = await offer(conf, nonce)
    assert result.offered
    assert len(result.jobs) == 1
    assert await offers(conf) == [f"{nonce}:{LEASE_MS}"]


async def test_at_most_one_offer_stands_on_a_queue(conf: Harness) -> None:
    """A fleet parked on one queue keeps one offer standing, not one per worker (each costs its
    worker a renewal); the others are woken by tokens, and a worker's own renewal still offers."""
    assert OFFERS_PER_QUEUE == 1
    first, second = new_nonce(), new_nonce()
    assert (await offer(conf, first)).offered
    assert not (await offer(conf, second)).offered
    assert await offers(conf) == [f"{first}:{LEASE_MS}"]
    assert (await offer(conf, first, standing=True)).offered  # its own is withdrawn first
    await conf.enqueue(b"h")  # used: the offer is gone, its place is free
    assert (await offer(conf, second)).offered


async def test_a_claim_that_leaves_jobs_pending_makes_no_offer(conf: Harness) -> None:
    await conf.enqueue_many(3)
    result = await offer(conf, new_nonce(), count=2)
    assert not result.offered
    assert len(result.jobs) == 2
    assert await offers(conf) == []


async def test_a_claim_with_no_room_to_spare_makes_no_offer(conf: Harness) -> None:
    """The worker keeps a slot for its other queues: room 2 with 1 slot asked makes no offer."""
    terms = OfferTerms(new_nonce(), OFFER_MS, room=2)
    result = await conf.queue.claim(1, LEASE_MS, new_nonce(), terms)
    assert not result.offered
    assert result.jobs == ()
    assert await offers(conf) == []


async def test_the_next_enqueue_is_leased_straight_to_the_offer(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    job_id = await conf.enqueue(b"payload:with:colons")
    # Leased as a claim would: attempts 1, state active, a deadline, the lock with the offer's
    # nonce; never in pending, no wake token (the worker's BLPOP gets the job itself).
    assert await conf.row(job_id) == {
        b"state": b"active",
        b"attempts": b"1",
        b"payload": b"payload:with:colons",
    }
    assert await conf.score(conf.keys.active, job_id) is not None
    assert await conf.client.get(conf.keys.lock(job_id)) == f"1:{nonce}".encode()
    assert await conf.members(conf.keys.pending) == []
    assert await wake_tokens(conf) == 0
    assert await offers(conf) == []  # used up
    [item] = await handoff_items(conf, nonce)
    job = handed_off_job(conf.queue.name, nonce, item)
    assert (job.id, job.payload, job.token, job.nonce) == (job_id, b"payload:with:colons", 1, nonce)
    # The holder's writes pass the fence like a claimed job's.
    assert (await conf.queue.complete(held(job), RECEIPT_MS)).status is SettleStatus.OK
    assert await conf.row(job_id) == {}


async def test_one_offer_takes_the_oldest_job_of_a_batch_the_rest_wait(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    specs = [JobSpec("noop", {"n": n}) for n in range(3)]
    ids = [e.job_id for e in await conf.producer.enqueue_many(conf.queue.name, specs)]
    [item] = await handoff_items(conf, nonce)
    assert handed_off_job(conf.queue.name, nonce, item).id == ids[0]
    assert await conf.members(conf.keys.pending) == ids[1:]
    assert await wake_tokens(conf) == 2


@pytest.mark.parametrize(
    ("meta", "value"),
    [("paused", "1"), ("concurrency", "5"), ("max", "5")],
)
async def test_no_hand_off_to_a_paused_or_limited_queue(
    conf: Harness, meta: str, value: str
) -> None:
    """Only the claim enforces pause and limits, so a queue with either hands nothing off."""
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    await conf.client.hset(conf.keys.meta, meta, value)
    job_id = await conf.enqueue()
    assert await conf.members(conf.keys.pending) == [job_id]
    assert await handoff_items(conf, nonce) == []
    assert await offers(conf) == [f"{nonce}:{LEASE_MS}"]


async def test_no_hand_off_ahead_of_a_job_already_waiting(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    # A job that reached pending some other way (promoted, reaped, an Elixir producer's enqueue).
    waiting = conf.mint()
    await conf.client.hset(
        conf.keys.job(waiting), mapping={"state": "pending", "attempts": "0", "payload": "w"}
    )
    await conf.client.zadd(conf.keys.pending, {waiting: 0})
    newer = await conf.enqueue()
    assert await conf.members(conf.keys.pending) == [waiting, newer]
    assert await handoff_items(conf, nonce) == []


async def test_a_lapsed_offer_takes_nothing(conf: Harness) -> None:
    nonce = new_nonce()
    await conf.client.zadd(conf.keys.offers, {f"{nonce}:{LEASE_MS}": 1})  # lapsed in 1970
    job_id = await conf.enqueue()
    assert await conf.members(conf.keys.pending) == [job_id]
    assert await handoff_items(conf, nonce) == []
    assert await offers(conf) == []  # swept


async def test_a_standing_offer_is_kept_standing_without_a_claim(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    member = f"{nonce}:{LEASE_MS}"
    await conf.client.zadd(conf.keys.offers, {member: 1}, xx=True)  # about to lapse
    await conf.client.pexpire(conf.keys.offers, 50)
    assert await conf.queue.keep_offer(nonce, LEASE_MS, OFFER_MS)
    score = await conf.score(conf.keys.offers, member)
    assert score is not None
    lapses_in = score - await server_ms(conf.client)
    assert OFFER_MS - 1_000 < lapses_in <= OFFER_MS
    assert await conf.client.pttl(conf.keys.offers) > OFFER_MS - 1_000  # the set outlives it
    handed = await conf.enqueue(b"h")  # it still takes the next job
    assert [item.split(b":")[1].decode() for item in await handoff_items(conf, nonce)] == [handed]


async def test_an_offer_used_or_gone_is_not_made_again_by_keeping_it(conf: Harness) -> None:
    """Used: its job waits on the hand-off list for the worker's next claim, which takes it over
    (an offer kept after the hand-off would take a second job the worker counts as leased from
    the keeping, later than its lease began)."""
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    await conf.enqueue(b"h")
    assert not await conf.queue.keep_offer(nonce, LEASE_MS, OFFER_MS)
    assert await offers(conf) == []
    assert not await conf.queue.keep_offer(new_nonce(), LEASE_MS, OFFER_MS)
    assert not await conf.exists(conf.keys.offers)


async def test_the_next_claim_withdraws_the_offer_and_takes_over_its_job(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    handed = await conf.enqueue(b"h")
    later = await conf.enqueue(b"l")  # the offer is used up: this one waits in pending
    claim_nonce = new_nonce()
    result = await conf.queue.claim(10, LEASE_MS, claim_nonce, OfferTerms(nonce, 0, True))
    # The job taken over comes first, at attempts 1, under the new claim's nonce.
    assert [(job.id, job.payload, job.token) for job in result.jobs] == [
        (handed, b"h", 1),
        (later, b"l", 1),
    ]
    assert await conf.client.get(conf.keys.lock(handed)) == f"1:{claim_nonce}".encode()
    assert await handoff_items(conf, nonce) == []
    assert not result.offered
    assert await offers(conf) == []
    # A re-sent claim (its reply lost) finds both in its memo.
    again = await conf.queue.claim(10, LEASE_MS, claim_nonce, OfferTerms(nonce, 0, True))
    assert [job.id for job in again.jobs] == [handed, later]


async def test_a_job_taken_back_by_the_reaper_is_not_taken_over(conf: Harness) -> None:
    """A worker that froze with a job handed to it: the reaper returns the job, and the worker's
    next claim does not take it back from the queue."""
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    job_id = await conf.enqueue()
    await lapse_and_reap(conf, job_id)
    assert await handoff_items(conf, nonce) != []
    result = await conf.queue.claim(10, LEASE_MS, new_nonce(), OfferTerms(nonce, 0, True))
    # Claimed afresh from pending, at attempts 2, not taken over at attempts 1.
    assert [(job.id, job.token) for job in result.jobs] == [(job_id, 2)]


async def test_a_job_another_worker_holds_is_not_taken_over(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    job_id = await conf.enqueue()
    await lapse_and_reap(conf, job_id)
    other = await conf.claim_one()  # attempts 2, another worker's lock
    result = await conf.queue.claim(10, LEASE_MS, new_nonce(), OfferTerms(nonce, 0, True))
    assert result.jobs == ()
    assert await conf.client.get(conf.keys.lock(job_id)) == f"2:{other.nonce}".encode()


async def test_a_resent_claim_reports_the_offer_it_left(conf: Harness) -> None:
    nonce, claim_nonce = new_nonce(), new_nonce()
    await conf.enqueue()
    terms = OfferTerms(nonce, OFFER_MS)
    assert (await conf.queue.claim(10, LEASE_MS, claim_nonce, terms)).offered
    assert (await conf.queue.claim(10, LEASE_MS, claim_nonce, terms)).offered


async def test_withdraw_hands_the_jobs_back_to_pending(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    job_id = await conf.enqueue()
    assert await conf.queue.withdraw(nonce, LEASE_MS) == 1
    assert await conf.field(job_id, "state") == b"pending"
    assert await conf.field(job_id, "attempts") == b"1"  # attempts only ever climb
    assert await conf.members(conf.keys.pending) == [job_id]
    assert await conf.members(conf.keys.active) == []
    assert not await conf.exists(conf.keys.lock(job_id))
    assert await wake_tokens(conf) == 1
    # Nothing more is handed to it.
    newer = await conf.enqueue()
    assert await conf.members(conf.keys.pending) == [job_id, newer]
    assert await conf.queue.withdraw(nonce, LEASE_MS) == 0


async def test_withdraw_leaves_a_job_another_worker_holds(conf: Harness) -> None:
    nonce = new_nonce()
    assert (await offer(conf, nonce)).offered
    job_id = await conf.enqueue()
    await lapse_and_reap(conf, job_id)
    taken = await conf.claim_one()
    assert await conf.queue.withdraw(nonce, LEASE_MS) == 0
    assert await conf.field(job_id, "state") == b"active"
    assert await conf.client.get(conf.keys.lock(job_id)) == f"2:{taken.nonce}".encode()


async def test_a_stopping_worker_withdraws_its_offers_and_hands_their_jobs_back(
    conf: Harness,
) -> None:
    """What the supervisor does on a graceful stop, with a job handed over after its park ended."""
    book = Offers([conf.queue], OFFER_MS)
    terms = book.terms(conf.queue.name, may_offer=True)
    result = await conf.queue.claim(10, LEASE_MS, new_nonce(), terms)
    book.claimed(conf.queue.name, terms, 0.0, result)
    assert book.reserved(other_than="another queue") == 1
    job_id = await conf.enqueue()
    assert await book.withdraw(LEASE_MS) == 1
    assert book.reserved(other_than="another queue") == 0
    assert await conf.members(conf.keys.pending) == [job_id]
    assert await offers(conf) == []


# ---- workers ---------------------------------------------------------------------------------


def gated_app(gate: anyio.Event, running: list[int], peak: list[int]) -> App:
    app = App()

    @app.task
    async def hold(ctx: JobContext) -> None:
        running.append(1)
        peak[0] = max(peak[0], len(running))
        try:
            await gate.wait()
        finally:
            running.pop()

    @app.task
    async def noop(ctx: JobContext) -> None:
        return None

    return app


async def completed(worker: Worker, n: int) -> None:
    await until(lambda: worker.counters.completed == n, what=f"{n} completions")


async def holding(running: list[int], n: int) -> None:
    await until(lambda: len(running) == n, what=f"{n} jobs running")


async def offer_stands(client: Redis, key: str, count: int = 1) -> None:
    async def standing() -> bool:
        return int(await client.zcard(key)) == count

    await eventually(standing, timeout=5, what=f"{count} offer(s) on {key}")


async def test_an_idle_worker_runs_a_job_handed_to_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    conf = Harness.of(client, queue_name)
    app = gated_app(anyio.Event(), [], [0])
    async with running_worker(worker_settings(queue_name, redis_url), app) as worker:
        await offer_stands(client, conf.keys.offers)
        enqueued = await Producer(client).enqueue(queue_name, "noop")
        await until(lambda: worker.counters.completed == 1, what="the job completed")
        assert worker.counters.handed_off == 1
        assert await conf.row(enqueued.job_id) == {}
        await offer_stands(client, conf.keys.offers)  # the next claim left a new one
    # A graceful stop takes its offer back: the next job waits in pending for someone else.
    assert await offers(conf) == []
    later = await conf.enqueue()
    assert await conf.members(conf.keys.pending) == [later]


HANDED_LEASE_MS = 1_500
"""Kept by renewals every 500 ms: a 400 ms lease lapsed under a stall of this (the test's)
event loop at load 15 (the job ran twice, [1, 2]); this one outlasts a stall of about 1 s."""


@pytest.mark.fault  # a lease kept by renewals: a long enough stall of the loop lapses it
async def test_a_long_job_handed_off_is_renewed_like_a_claimed_one(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """The renewal sweep keeps a handed-off lease: a job running three leases long runs once."""
    conf = Harness.of(client, queue_name)
    app = App()
    attempts: list[int] = []

    @app.task
    async def long(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        await anyio.sleep(3 * HANDED_LEASE_MS / 1000)

    settings = worker_settings(queue_name, redis_url, lease_ms=HANDED_LEASE_MS, beat_ms=100)
    async with loop_lag() as lag, running_worker(settings, app) as worker:
        await offer_stands(client, conf.keys.offers)
        await Producer(client).enqueue(queue_name, "long")
        await completed(worker, 1)
    assert worker.counters.handed_off == 1
    # The precondition: the loop ran; a stall past the lease less a renewal tick and the stop
    # margin lapses any lease, handed off or claimed, and proves nothing about this one.
    budget_s = (HANDED_LEASE_MS - settings.renew_interval_ms - settings.stop_margin) / 1000
    assert lag.max_s < budget_s, f"the loop stalled {lag.max_s:.2f} s; budget {budget_s} s"
    assert attempts == [1]
    assert (worker.counters.leases_lost, worker.counters.self_fenced) == (0, 0)


async def test_an_idle_worker_keeps_its_offer_standing_without_claiming(
    client: Redis, redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An offer lives a third of the lease (200 ms here); a worker parked through several of
    them renews it with lua/offer.lua (four commands), not a claim (fourteen) each time, and it
    still takes a job."""
    conf = Harness.of(client, queue_name)
    claims: list[str] = []
    claim = Queue.claim

    async def counted(queue: Queue, *args: Any, **kwargs: Any) -> ClaimResult:
        claims.append(queue.name)
        return await claim(queue, *args, **kwargs)

    monkeypatch.setattr(Queue, "claim", counted)
    settings = worker_settings(queue_name, redis_url, lease_ms=600, beat_ms=100)
    async with running_worker(settings, gated_app(anyio.Event(), [], [0])) as worker:
        await offer_stands(client, conf.keys.offers)
        (member,) = await offers(conf)
        first = await conf.score(conf.keys.offers, member)
        assert first is not None
        claims.clear()

        async def renewed_twice() -> bool:
            score = await conf.score(conf.keys.offers, member)
            return score is not None and score >= first + 2 * 200

        await eventually(renewed_twice, timeout=10, what="the same offer renewed twice")
        assert claims == []
        enqueued = await Producer(client).enqueue(queue_name, "noop")
        await until(lambda: worker.counters.completed == 1, what="the job completed")
        assert worker.counters.handed_off == 1
        assert await conf.row(enqueued.job_id) == {}


async def test_hand_offs_never_take_a_worker_past_its_concurrency(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    gate, running, peak = anyio.Event(), list[int](), [0]
    conf = Harness.of(client, queue_name)
    settings = worker_settings(queue_name, redis_url, concurrency=2)
    producer = Producer(client)
    async with running_worker(settings, gated_app(gate, running, peak)) as worker:
        for held_now in (1, 2):
            await offer_stands(client, conf.keys.offers)
            await producer.enqueue(queue_name, "hold")
            await holding(running, held_now)
        await producer.enqueue(queue_name, "hold")  # no slot, no offer: it waits in pending
        assert await offers(conf) == []
        assert len(await conf.members(conf.keys.pending)) == 1
        gate.set()
        await until(lambda: worker.counters.completed == 3, what="3 completions")
    assert peak[0] == 2
    assert worker.counters.handed_off == 2


def two_queues(client: Redis, queue_name: str) -> tuple[Harness, Harness]:
    return Harness.of(client, f"{queue_name}.a"), Harness.of(client, f"{queue_name}.b")


async def test_a_worker_on_two_queues_keeps_an_offer_on_each(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    a, b = two_queues(client, queue_name)
    first, second = a.queue.name, b.queue.name
    settings = worker_settings((first, second), redis_url, concurrency=2)
    producer = Producer(client)
    async with running_worker(settings, gated_app(anyio.Event(), [], [0])) as worker:
        await offer_stands(client, a.keys.offers)
        await offer_stands(client, b.keys.offers)
        await producer.enqueue(second, "noop")
        await until(lambda: worker.counters.completed == 1, what="the second queue's job")
        await offer_stands(client, b.keys.offers)
        await producer.enqueue(first, "noop")
        await until(lambda: worker.counters.completed == 2, what="the first queue's job")
    assert worker.counters.handed_off == 2


async def test_one_slot_for_two_queues_makes_no_offer_and_serves_both(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """An offer on one queue would hold the only slot the other queue's jobs need."""
    a, b = two_queues(client, queue_name)
    first, second = a.queue.name, b.queue.name
    settings = worker_settings((first, second), redis_url, concurrency=1)
    producer = Producer(client)
    async with running_worker(settings, gated_app(anyio.Event(), [], [0])) as worker:
        for n, name in enumerate((second, first, second), start=1):
            await producer.enqueue(name, "noop")
            await completed(worker, n)
        assert await offers(a) == []
        assert await offers(b) == []
    assert worker.counters.handed_off == 0


async def test_no_handoff_makes_no_offers(client: Redis, redis_url: str, queue_name: str) -> None:
    conf = Harness.of(client, queue_name)
    settings = worker_settings(queue_name, redis_url, handoff=False)
    async with running_worker(settings, gated_app(anyio.Event(), [], [0])) as worker:
        for n in (1, 2):
            await Producer(client).enqueue(queue_name, "noop")
            await completed(worker, n)
        assert await offers(conf) == []
    assert worker.counters.handed_off == 0
