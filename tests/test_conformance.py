"""EchoMQ's flat-queue conformance scenarios (echomq-wire.md section 6), driven through our API.

Each test is one scenario on its own queue: our verbs make the moves, raw Redis commands check
the keys an Elixir node would read. Where emq-worker is deliberately stricter than EchoMQ
(section 7, D1-D11), the test asserts our outcome and says which defect it fixes.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis

from emq_worker.errors import JobIdError, KindError, LockedError, StateError
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.keys import VERSION_KEY
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId, Token
from emq_worker.protocol.replies import (
    ClaimedJob,
    LostLease,
    ReapResult,
    SettleResult,
    SettleStatus,
)
from emq_worker.protocol.values import Counts, HeldLease, NewJob
from emq_worker.retry import Exponential, delay_ms
from emq_worker.valkey.connection import connect
from tests.support.conformance import (
    LEASE_MS,
    RECEIPT_MS,
    Harness,
    foreign_id,
    held,
    lapse,
)

OK = SettleResult(SettleStatus.OK, "completed")
GONE = SettleResult(SettleStatus.GONE)
SHORT_LEASE_MS = 30
"""A lease short enough to let it lapse in a test; the sleep past it is the scenario."""


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


def scheduled_as(outcome: str) -> SettleResult:
    return SettleResult(SettleStatus.OK, outcome)


# --- producer: fence, mint, duplicate, kind, order, pool_* -------------------------------------


async def test_fence_writes_the_wire_version(client: Redis) -> None:
    assert await client.get(VERSION_KEY) == DEFAULT_WIRE_VERSION.encode()


async def test_mint_writes_exactly_the_three_field_row(conf: Harness) -> None:
    enqueued = await conf.producer.enqueue_raw(conf.queue.name, b"cargo")
    assert not enqueued.duplicate
    assert await conf.row(enqueued.job_id) == {
        b"state": b"pending",
        b"attempts": b"0",
        b"payload": b"cargo",
    }
    assert await conf.score(conf.keys.pending, enqueued.job_id) == 0.0


async def test_duplicate_keeps_the_original_row(conf: Harness) -> None:
    job_id = conf.mint()
    first = await conf.producer.enqueue_raw(conf.queue.name, b"once", job_id=job_id)
    again = await conf.producer.enqueue_raw(conf.queue.name, b"twice", job_id=job_id)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert await conf.field(job_id, "payload") == b"once"
    assert await conf.members(conf.keys.pending) == [job_id]


async def test_kind_refuses_a_foreign_namespace_before_any_write(conf: Harness) -> None:
    good, foreign = conf.mint(), JobId(foreign_id("ORD"))
    with pytest.raises(KindError) as refused:
        await conf.queue.enqueue([NewJob(good, b"x"), NewJob(foreign, b"x")])
    assert refused.value.error_class == "EMQKIND"
    # The script checks every id before writing any: the JOB id in the same batch is not written.
    assert not await conf.exists(conf.keys.job(foreign))
    assert not await conf.exists(conf.keys.job(good))
    assert await conf.members(conf.keys.pending) == []
    # The producer's key builder refuses a non-JOB id before any wire traffic.
    with pytest.raises(JobIdError):
        await conf.producer.enqueue_raw(conf.queue.name, b"x", job_id=foreign)


async def test_order_browse_is_reverse_mint_order(conf: Harness) -> None:
    ids = await conf.enqueue_many(3)
    assert await conf.browse_rev(conf.keys.pending) == ids[::-1]


async def test_pool_enqueue_over_two_connections_is_idempotent(
    conf: Harness, redis_url: str
) -> None:
    job_id = conf.mint()
    async with connect(redis_url, DEFAULT_WIRE_VERSION) as other:
        first = await Producer(conf.client).enqueue_raw(conf.queue.name, b"cargo", job_id=job_id)
        second = await Producer(other).enqueue_raw(conf.queue.name, b"cargo", job_id=job_id)
    assert (first.duplicate, second.duplicate) == (False, True)
    assert await conf.row(job_id) == {
        b"state": b"pending",
        b"attempts": b"0",
        b"payload": b"cargo",
    }
    assert await conf.score(conf.keys.pending, job_id) == 0.0
    assert await conf.client.zcard(conf.keys.pending) == 1


async def test_pool_order_round_robin_keeps_mint_order(conf: Harness, redis_url: str) -> None:
    ids = [conf.mint() for _ in range(5)]
    async with connect(redis_url, DEFAULT_WIRE_VERSION) as other:
        producers = [Producer(conf.client), Producer(other)]
        for i, job_id in enumerate(ids):
            await producers[i % 2].enqueue_raw(conf.queue.name, b"x", job_id=job_id)
    assert await conf.browse_rev(conf.keys.pending) == ids[::-1]


# --- claim and settle: claim, stale, complete, retry, dead, reap, schedule, backoff -------------


async def test_claim_leases_the_job_at_attempt_one(conf: Harness) -> None:
    job_id = await conf.enqueue(b"work")
    job = await conf.claim_one()
    assert (job.id, job.payload, job.token) == (job_id, b"work", 1)
    assert await conf.field(job_id, "state") == b"active"
    assert await conf.score(conf.keys.active, job_id) is not None


async def test_stale_token_is_fenced_after_script_flush(conf: Harness) -> None:
    await conf.client.script_flush()
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    assert job.token == 1
    assert await conf.complete(job, token=99) == SettleResult(SettleStatus.STALE, "1")
    assert await conf.complete(job) == OK
    assert not await conf.exists(conf.keys.job(job_id))


async def test_every_verb_reloads_its_script_after_script_flush(conf: Harness) -> None:
    flush = conf.client.script_flush
    await flush()
    first, second = await conf.enqueue_many(2)
    await flush()
    a, b = await conf.claim(2)
    await flush()
    assert await conf.queue.renew([held(a), held(b)], LEASE_MS) == []
    await flush()
    assert await conf.queue.release([held(b)]) == 1
    await flush()
    assert await conf.fail(a, max_attempts=1) == scheduled_as("dead")
    await flush()
    assert await conf.queue.reprocess(first) is True
    await flush()
    assert await conf.queue.remove(second) is True
    await flush()
    assert (await conf.queue.promote(10)).promoted == 0
    await flush()
    assert await conf.queue.reap(10, 3) == ReapResult(0, 0, 0, False)
    assert await conf.queue.state_of(first) == "pending"


async def test_complete_deletes_the_row_and_its_subkeys(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    await conf.client.rpush(conf.keys.logs(job_id), "line-1")
    assert await conf.complete(job) == OK
    assert not await conf.exists(conf.keys.job(job_id))
    assert await conf.client.zcard(conf.keys.active) == 0
    # D9: the lock and logs subkeys go with the row.
    assert not await conf.exists(conf.keys.lock(job_id))
    assert not await conf.exists(conf.keys.logs(job_id))


async def test_retry_schedules_then_promote_and_reclaim_at_attempt_two(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    assert await conf.fail(job, delay_ms=10, max_attempts=3, error="boom") == scheduled_as(
        "scheduled"
    )
    assert await conf.field(job_id, "state") == b"scheduled"
    assert await conf.field(job_id, "last_error") == b"boom"
    await lapse(30)
    assert (await conf.queue.promote(10)).promoted == 1
    again = await conf.claim_one()
    assert (again.id, again.token) == (job_id, 2)
    assert await conf.complete(again) == OK


async def test_dead_at_max_attempts(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    assert await conf.fail(job, max_attempts=1, error="gave up") == scheduled_as("dead")
    assert await conf.field(job_id, "state") == b"dead"
    assert await conf.field(job_id, "last_error") == b"gave up"
    assert await conf.browse_rev(conf.keys.dead) == [job_id]
    assert await conf.metric("failed") == (1, 0)


async def test_reap_returns_an_expired_lease_to_pending(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await conf.claim_one(SHORT_LEASE_MS)
    await lapse(2 * SHORT_LEASE_MS)
    assert (await conf.queue.reap(100, 3)).returned == 1
    assert await conf.field(job_id, "state") == b"pending"
    again = await conf.claim_one()
    assert (again.id, again.token) == (job_id, 2)
    assert await conf.complete(again) == OK


async def test_reap_at_max_attempts_dead_letters(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await conf.claim_one(SHORT_LEASE_MS)
    await lapse(2 * SHORT_LEASE_MS)
    # D2: EchoMQ's reap cycles a crash loop forever; ours dead-letters at max_attempts.
    assert await conf.queue.reap(100, 1) == ReapResult(0, 1, 0, False)
    assert await conf.queue.state_of(job_id) == "dead"
    last_error = await conf.field(job_id, "last_error")
    assert last_error is not None
    assert last_error.startswith(b"lease expired")
    assert await conf.metric("failed") == (1, 0)
    assert not await conf.exists(conf.keys.lock(job_id))


async def test_schedule_runs_only_after_promote(conf: Harness) -> None:
    job_id = await conf.enqueue(b"later", delay_ms=30)
    assert await conf.field(job_id, "state") == b"scheduled"
    assert await conf.claim(1) == ()
    await lapse(50)
    assert (await conf.queue.promote(10)).promoted == 1
    job = await conf.claim_one()
    assert (job.id, job.payload, job.token) == (job_id, b"later", 1)
    assert await conf.complete(job) == OK


async def test_backoff_exponential_ends_dead_at_attempt_three(conf: Harness) -> None:
    policy, rng = Exponential(1, 10), random.Random(0)
    job_id = await conf.enqueue()
    steps: list[tuple[int, int, str]] = []
    for _ in range(3):
        job = await conf.claim_one()
        wait = delay_ms(policy, job.token, rng)
        result = await conf.fail(job, delay_ms=wait, max_attempts=3, error=f"boom {job.token}")
        steps.append((job.token, wait, result.detail))
        if result.detail == "scheduled":
            await lapse(wait + 5)
            assert (await conf.queue.promote(10)).promoted == 1
    assert steps == [(1, 1, "scheduled"), (2, 2, "scheduled"), (3, 4, "dead")]
    assert await conf.field(job_id, "state") == b"dead"
    assert await conf.field(job_id, "last_error") == b"boom 3"
    assert await conf.browse_rev(conf.keys.dead) == [job_id]


# --- reads: counts, state, metrics, unknown_state --------------------------------------------


async def test_counts_per_set(conf: Harness) -> None:
    await conf.enqueue()
    await conf.claim_one()
    await conf.enqueue_many(3)
    await conf.enqueue(delay_ms=60_000)
    assert await conf.queue.counts() == Counts(
        pending=3, active=1, scheduled=1, dead=0, completed=0, failed=0
    )


async def test_state_and_get_job(conf: Harness) -> None:
    claimed = await conf.enqueue(b"s")
    await conf.claim_one()
    later = await conf.enqueue(delay_ms=60_000)
    assert await conf.queue.state_of(claimed) == "active"
    assert await conf.queue.state_of(later) == "scheduled"
    assert await conf.queue.state_of(conf.mint()) == "absent"
    assert await conf.queue.get_job(claimed) == {"state": "active", "attempts": "1", "payload": "s"}
    assert await conf.queue.get_job(conf.mint()) is None


async def test_metrics_count_completions(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one()
    assert await conf.metric("completed") == (0, 0)
    assert await conf.complete(job) == OK
    assert await conf.metric("completed") == (1, 0)


async def test_unknown_state_when_only_the_row_is_left(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await conf.claim_one()
    await conf.client.zrem(conf.keys.active, job_id)
    assert await conf.queue.state_of(job_id) == "unknown"
    job = await conf.queue.get_job(job_id)
    assert job is not None
    assert job["state"] == "active"
    assert await conf.queue.state_of(conf.mint()) == "absent"


# --- admin: queue_pause, remove_job, reprocess_job --------------------------------------------


async def test_queue_pause_holds_claims_until_resume(conf: Harness) -> None:
    job_id = await conf.enqueue(b"p")
    await conf.queue.pause()
    paused = await conf.queue.claim(1, LEASE_MS)
    assert (paused.paused, paused.jobs) == (True, ())
    assert (await conf.queue.counts()).pending == 1
    await conf.queue.resume()
    job = await conf.claim_one()
    assert (job.id, job.payload, job.token) == (job_id, b"p", 1)


async def test_remove_job_releases_only_its_own_dedup_key(conf: Harness) -> None:
    job_id, other = conf.mint(), conf.mint()
    await conf.enqueue(job_id=job_id)
    dedup, orphan = conf.keys.prefix + "de:dedup-7", conf.keys.prefix + "de:conf-orphan"
    await conf.client.set(dedup, job_id)
    await conf.client.set(orphan, other)
    assert await conf.client.get(dedup) == job_id.encode()
    assert await conf.queue.remove(job_id, "dedup-7") is True
    assert await conf.queue.state_of(job_id) == "absent"
    assert not await conf.exists(dedup)
    assert await conf.client.get(orphan) == other.encode()
    # D10: a second remove finds the job gone, as a value, not an error.
    assert await conf.queue.remove(job_id) is False


async def test_remove_job_refuses_a_locked_job(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await conf.client.set(conf.keys.lock(job_id), "worker-1")
    with pytest.raises(LockedError) as refused:
        await conf.queue.remove(job_id)
    assert refused.value.error_class == "EMQLOCK"
    assert await conf.queue.state_of(job_id) == "pending"
    assert await conf.field(job_id, "payload") == b"x"


async def test_remove_job_refuses_a_job_our_claim_holds(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await conf.claim_one()
    with pytest.raises(LockedError):
        await conf.queue.remove(job_id)
    assert await conf.queue.state_of(job_id) == "active"


async def test_purging_removes_a_job_only_while_it_is_dead(conf: Harness) -> None:
    """Ours: remove(only_dead=True) checks dead membership in the same script, so a purge can
    never delete a job that was reprocessed between an operator's look and the purge."""
    job_id = await conf.enqueue()
    with pytest.raises(StateError):
        await conf.queue.remove(job_id, only_dead=True)
    assert await conf.queue.state_of(job_id) == "pending"
    job = await conf.claim_one()
    assert await conf.fail(job, max_attempts=1, error="gave up") == scheduled_as("dead")
    assert await conf.queue.remove(job_id, only_dead=True) is True
    assert await conf.queue.state_of(job_id) == "absent"


async def test_reprocess_job_returns_a_dead_job_with_a_fresh_budget(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    assert await conf.fail(job, max_attempts=1, error="gave up") == scheduled_as("dead")
    assert await conf.queue.reprocess(job_id) is True
    assert await conf.queue.state_of(job_id) == "pending"
    assert await conf.field(job_id, "state") == b"pending"
    assert await conf.field(job_id, "last_error") is None
    # The move to dead raised attempts past the last holder's token (1), spending no attempt.
    assert await conf.field(job_id, "attempts") == b"2"
    again = await conf.claim_one()
    assert again.token == 3
    # D11: EchoMQ keeps attempts, so 3 >= max 2 would dead-letter at once; ours counts afresh.
    assert await conf.fail(again, delay_ms=60_000, max_attempts=2) == scheduled_as("scheduled")


async def test_reprocess_job_refuses_a_job_that_is_not_dead(conf: Harness) -> None:
    job_id = await conf.enqueue()
    with pytest.raises(StateError) as refused:
        await conf.queue.reprocess(job_id)
    assert refused.value.error_class == "EMQSTATE"
    assert await conf.queue.state_of(job_id) == "pending"
    assert await conf.queue.reprocess(conf.mint()) is False


# --- renew: lock_extend, extend_locks_batch --------------------------------------------------


async def test_lock_extend_outlives_the_first_lease(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one(50)
    assert await conf.queue.renew([held(job)], LEASE_MS) == []
    await lapse(120)
    assert await conf.queue.reap(100, 3) == ReapResult(0, 0, 0, False)
    assert await conf.score(conf.keys.active, job_id) is not None
    assert await conf.queue.renew([held(job, token=2)], LEASE_MS) == [LostLease(job_id, "1")]
    missing = conf.mint()
    # D10: a renew of a gone job is one typed outcome: lost, with no current attempts.
    assert await conf.queue.renew([HeldLease(missing, Token(1), job.nonce)], LEASE_MS) == [
        LostLease(missing, "")
    ]


async def test_extend_locks_batch_reports_stale_and_gone_only(conf: Harness) -> None:
    await conf.enqueue_many(2)
    live, stale = await conf.claim(2)
    gone = HeldLease(conf.mint(), Token(1), live.nonce)
    before = await conf.score(conf.keys.active, live.id)
    lost = await conf.queue.renew([held(live), held(stale, token=999), gone], 90_000)
    assert {lease.id for lease in lost} == {stale.id, gone.id}
    after = await conf.score(conf.keys.active, live.id)
    assert before is not None
    assert after is not None
    assert after > before


# --- batches: batch_claim, batch_claim_short, batch_partial_failure, batch_partition ----------


async def test_batch_claim_takes_the_oldest_with_one_deadline(conf: Harness) -> None:
    ids = await conf.enqueue_many(8)
    jobs = await conf.claim(4)
    assert [(job.id, job.token) for job in jobs] == [(job_id, 1) for job_id in ids[:4]]
    deadlines = {await conf.score(conf.keys.active, job.id) for job in jobs}
    assert len(deadlines) == 1
    assert None not in deadlines
    assert [await conf.queue.state_of(job.id) for job in jobs] == ["active"] * 4


async def test_batch_claim_short_underfills_and_respects_pause(
    conf: Harness, client: Redis, queue_name: str
) -> None:
    ids = await conf.enqueue_many(3)
    assert [job.id for job in await conf.claim(7)] == ids
    assert await conf.claim(5) == ()
    paused = Harness.of(client, f"{queue_name}.paused")
    await paused.enqueue()
    await paused.queue.pause()
    result = await paused.queue.claim(5, LEASE_MS)
    assert (result.paused, result.jobs) == (True, ())
    assert await client.zcard(paused.keys.pending) == 1


async def test_batch_partial_failure_retries_only_the_poisoned_head(conf: Harness) -> None:
    ids = await conf.enqueue_many(3)
    head, *rest = await conf.claim(3)
    assert (head.id, head.token) == (ids[0], 1)
    assert await conf.complete(head, token=99) == SettleResult(SettleStatus.STALE, "1")
    result = await conf.fail(head, delay_ms=5, max_attempts=3, error="poison")
    assert result == scheduled_as("scheduled")
    for job in rest:
        assert await conf.complete(job) == OK
        assert not await conf.exists(conf.keys.job(job.id))
    assert await conf.field(head.id, "state") == b"scheduled"
    assert await conf.field(head.id, "last_error") == b"poison"
    await lapse(30)
    assert (await conf.queue.promote(10)).promoted == 1
    assert [(job.id, job.token) for job in await conf.claim(5)] == [(head.id, 2)]


async def test_batch_partition_settles_each_member_alone(conf: Harness) -> None:
    ids = await conf.enqueue_many(5)
    jobs = await conf.claim(5)
    assert [job.id for job in jobs] == ids
    done, retried, poisoned, delayed, unjudged = jobs
    assert await conf.complete(done) == OK
    assert await conf.fail(retried, max_attempts=9) == scheduled_as("scheduled")
    assert await conf.fail(poisoned, max_attempts=1) == scheduled_as("dead")
    # We have no `delay` verb: a fail with a 30 ms delay stands in for EchoMQ's delay of #4.
    assert await conf.fail(delayed, delay_ms=30) == scheduled_as("scheduled")
    assert await conf.fail(unjudged, error="missing verdict") == scheduled_as("scheduled")
    states = [await conf.queue.state_of(job_id) for job_id in ids]
    assert states == ["absent", "scheduled", "dead", "scheduled", "scheduled"]
    assert await conf.row(done.id) == {}
    assert await conf.field(unjudged.id, "last_error") == b"missing verdict"


# --- our own: re-sent commands, the nonce fence, D1, D7, D8, D10 -----------------------------


async def test_a_resent_claim_with_the_same_nonce_leases_nothing_new(conf: Harness) -> None:
    ids = await conf.enqueue_many(3)
    first = await conf.queue.claim(2, LEASE_MS, nonce="resent-claim")
    again = await conf.queue.claim(2, LEASE_MS, nonce="resent-claim")
    assert [job.id for job in first.jobs] == ids[:2]
    assert again.jobs == first.jobs
    assert (await conf.queue.counts()).pending == 1
    assert (await conf.queue.counts()).active == 2
    assert [await conf.field(job_id, "attempts") for job_id in ids] == [b"1", b"1", b"0"]


Settle = Callable[[Harness, ClaimedJob], Awaitable[SettleResult]]


async def _complete(conf: Harness, job: ClaimedJob) -> SettleResult:
    return await conf.complete(job)


async def _retry(conf: Harness, job: ClaimedJob) -> SettleResult:
    return await conf.fail(job, delay_ms=60_000)


async def _dead_letter(conf: Harness, job: ClaimedJob) -> SettleResult:
    return await conf.fail(job, max_attempts=1)


@pytest.mark.parametrize(
    ("settle", "first", "outcome", "metrics"),
    [
        (_complete, OK, "completed", (1, 0)),
        (_retry, scheduled_as("scheduled"), "scheduled", (0, 0)),
        (_dead_letter, scheduled_as("dead"), "dead", (0, 1)),
    ],
    ids=["complete", "retry", "dead"],
)
async def test_a_resent_settle_answers_settled_and_counts_once(
    conf: Harness,
    settle: Settle,
    first: SettleResult,
    outcome: str,
    metrics: tuple[int, int],
) -> None:
    await conf.enqueue()
    job = await conf.claim_one()
    assert await settle(conf, job) == first
    counts = await conf.queue.counts()
    assert await settle(conf, job) == SettleResult(SettleStatus.SETTLED, outcome)
    assert await conf.queue.counts() == counts
    assert (counts.completed, counts.failed) == metrics


async def test_a_lock_with_another_nonce_fences_the_holder(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    # Redis lost writes and handed attempts 1 out twice: the lock subkey names the other claim.
    other = f"{job.token}:othernonce"
    await conf.client.set(conf.keys.lock(job_id), other, px=2 * LEASE_MS)
    row, deadline = await conf.row(job_id), await conf.score(conf.keys.active, job_id)
    stale = SettleResult(SettleStatus.STALE, other)
    assert await conf.complete(job) == stale
    assert await conf.fail(job) == stale
    assert await conf.queue.renew([held(job)], 2 * LEASE_MS) == [LostLease(job_id, other)]
    assert await conf.row(job_id) == row
    assert await conf.score(conf.keys.active, job_id) == deadline
    assert await conf.client.get(conf.keys.lock(job_id)) == other.encode()
    assert (await conf.queue.counts()).completed == 0
    # The holder the lock names is still the owner.
    rightful = HeldLease(job_id, job.token, "othernonce")
    assert await conf.queue.complete(rightful, RECEIPT_MS) == OK


async def _reaped(conf: Harness) -> ClaimedJob:
    job = await conf.claim_one(SHORT_LEASE_MS)
    await lapse(2 * SHORT_LEASE_MS)
    assert (await conf.queue.reap(100, 3)).returned == 1
    return job


async def _retried(conf: Harness) -> ClaimedJob:
    job = await conf.claim_one()
    assert await conf.fail(job, delay_ms=60_000) == scheduled_as("scheduled")
    return job


async def _dead_lettered(conf: Harness) -> ClaimedJob:
    job = await conf.claim_one()
    assert await conf.fail(job, max_attempts=1) == scheduled_as("dead")
    return job


@pytest.mark.parametrize(
    ("setup", "state", "current"),
    [
        (_reaped, "pending", "pending"),
        (_retried, "scheduled", "scheduled"),
        (_dead_lettered, "dead", "2"),  # a move to dead raises attempts past the holder's token
    ],
    ids=["reaped", "retried", "dead"],
)
async def test_renew_never_reinserts_a_job_that_left_active(
    conf: Harness, setup: Callable[[Harness], Awaitable[ClaimedJob]], state: str, current: str
) -> None:
    await conf.enqueue()
    job = await setup(conf)
    # D1: EchoMQ's extend re-inserts the job into active; ours reports the lease lost.
    assert await conf.queue.renew([held(job)], LEASE_MS) == [LostLease(job.id, current)]
    assert await conf.score(conf.keys.active, job.id) is None
    assert await conf.queue.state_of(job.id) == state
    assert await conf.field(job.id, "state") == state.encode()


async def test_a_late_uncontested_holder_can_still_complete(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await _reaped(conf)
    # D8: accepted from pending while nobody re-claimed it; it leaves pending with the row.
    assert await conf.complete(job) == OK
    assert await conf.queue.state_of(job_id) == "absent"
    assert await conf.members(conf.keys.pending) == []
    assert await conf.metric("completed") == (1, 0)


async def test_a_late_uncontested_holder_can_still_fail(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await _reaped(conf)
    # D8: EchoMQ's delay after a reap leaves the id in pending too; ours moves it.
    assert await conf.fail(job, delay_ms=60_000) == scheduled_as("scheduled")
    assert await conf.members(conf.keys.pending) == []
    assert await conf.members(conf.keys.schedule) == [job_id]


async def test_a_late_holder_is_fenced_once_the_job_is_reclaimed(conf: Harness) -> None:
    job_id = await conf.enqueue()
    late = await _reaped(conf)
    current = await conf.claim_one()
    assert (current.id, current.token) == (job_id, 2)
    stale = SettleResult(SettleStatus.STALE, "2")
    assert await conf.complete(late) == stale
    assert await conf.fail(late) == stale
    assert await conf.queue.renew([held(late)], LEASE_MS) == [LostLease(job_id, "2")]
    assert await conf.queue.state_of(job_id) == "active"
    assert await conf.field(job_id, "last_error") is None
    assert await conf.complete(current) == OK


@pytest.mark.parametrize(
    ("max_attempts", "state", "refusal"),
    [
        (3, "scheduled", SettleResult(SettleStatus.STATE, "scheduled")),
        (1, "dead", SettleResult(SettleStatus.STALE, "2")),  # dead raised attempts: fenced out
    ],
)
async def test_complete_is_refused_once_the_job_is_scheduled_or_dead(
    conf: Harness, max_attempts: int, state: str, refusal: SettleResult
) -> None:
    receipt_ms = 30
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    failed = await conf.queue.fail(
        held(job), receipt_ms, delay_ms=60_000, max_attempts=max_attempts, error="boom"
    )
    assert failed == scheduled_as(state)
    await lapse(2 * receipt_ms)
    # D8: EchoMQ deletes the row and strands the id in its set; ours refuses and changes nothing.
    assert await conf.complete(job) == refusal
    assert await conf.queue.state_of(job_id) == state
    assert await conf.field(job_id, "payload") == b"x"
    assert await conf.metric("completed") == (0, 0)


async def _phantom_in_pending(conf: Harness, phantom: JobId) -> int:
    await conf.client.zadd(conf.keys.pending, {phantom: 0})
    real = await conf.enqueue()
    result = await conf.queue.claim(5, LEASE_MS)
    assert [job.id for job in result.jobs] == [real]
    return result.phantoms


async def _phantom_in_active(conf: Harness, phantom: JobId) -> int:
    await conf.client.zadd(conf.keys.active, {phantom: 1})
    result = await conf.queue.reap(100, 3)
    assert (result.returned, result.dead) == (0, 0)
    return result.phantoms


async def _phantom_in_schedule(conf: Harness, phantom: JobId) -> int:
    await conf.client.zadd(conf.keys.schedule, {phantom: 1})
    result = await conf.queue.promote(10)
    assert result.promoted == 0
    return result.phantoms


@pytest.mark.parametrize(
    "verb",
    [_phantom_in_pending, _phantom_in_active, _phantom_in_schedule],
    ids=["claim", "reap", "promote"],
)
async def test_phantom_members_are_dropped_not_turned_into_rows(
    conf: Harness, verb: Callable[[Harness, JobId], Awaitable[int]]
) -> None:
    phantom = conf.mint()
    # D7: EchoMQ recreates a payload-less row for an orphan member; ours drops and counts it.
    assert await verb(conf, phantom) == 1
    assert not await conf.exists(conf.keys.job(phantom))
    assert await conf.queue.state_of(phantom) == "absent"


@pytest.mark.parametrize("settle", [_complete, _retry], ids=["complete", "fail"])
async def test_a_settle_of_a_gone_job_is_gone(conf: Harness, settle: Settle) -> None:
    missing = ClaimedJob(conf.queue.name, conf.mint(), b"", Token(1), "nonce")
    # D10: EchoMQ answers 0 for complete and EMQSTALE for retry; ours is GONE for both.
    assert await settle(conf, missing) == GONE
    assert await conf.queue.state_of(missing.id) == "absent"
