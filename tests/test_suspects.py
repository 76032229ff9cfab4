"""Suspects: a job whose lease the reaper took back twice (its holders died or froze while running
it) is leased beside ordinary jobs but never beside another suspect until it has waited half a
lease, so a job that kills its process takes no other suspect with it, and nothing waits for a
worker to empty. Scripts against a real redis-server, then one worker end to end."""

from __future__ import annotations

import time
from typing import Any, cast

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker import App, JobContext, Producer
from emq_worker.errors import ScriptError
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob, ClaimResult, claim_result
from emq_worker.runtime.lease import Lease, LeaseBook
from emq_worker.runtime.suspects import HeldSuspects
from tests.support.conformance import LEASE_MS, RECEIPT_MS, Harness, held, lapse
from tests.support.lag import loop_lag
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

SHORT_LEASE_MS = 30
"""A lease short enough to let it lapse in a test; the sleep past it is the scenario."""


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def suspects(conf: Harness) -> set[str]:
    members = cast(set[bytes], await conf.client.smembers(conf.keys.suspects))
    return {member.decode() for member in members}


async def server_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def mark_suspect(conf: Harness, job_id: str, waited_ms: int = 0) -> None:
    """What reap does to a job it returns to pending a second time (shown by the tests below),
    `waited_ms` ago."""
    await conf.client.sadd(conf.keys.suspects, job_id)
    reaped_at = await server_ms(conf.client) - waited_ms
    await conf.client.hset(conf.keys.job(job_id), "reaped_at", reaped_at)


def ids_of(result: ClaimResult) -> list[JobId]:
    return [job.id for job in result.jobs]


async def reaped_back(conf: Harness, max_attempts: int = 5) -> JobId:
    """A job claimed on a lease that lapsed, then reaped: its holder died as far as Redis knows."""
    job = await conf.claim_one(SHORT_LEASE_MS)
    await lapse(2 * SHORT_LEASE_MS)
    reaped = await conf.queue.reap(10, max_attempts)
    assert [job_id for job_id, _ in reaped.jobs] == [job.id]
    return job.id


async def test_a_job_reaped_once_with_attempts_to_spare_is_not_a_suspect(conf: Harness) -> None:
    """One death (a crash, a freeze, a partition) leaves the jobs free to run side by side."""
    job_id = await conf.enqueue()
    assert await reaped_back(conf, max_attempts=5) == job_id
    assert await conf.members(conf.keys.pending) == [job_id]
    assert await conf.field(job_id, "reaps") == b"1"
    assert await suspects(conf) == set()


async def test_a_job_reaped_twice_becomes_a_suspect(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await reaped_back(conf, max_attempts=5)
    await reaped_back(conf, max_attempts=5)
    assert await conf.members(conf.keys.pending) == [job_id]
    assert await suspects(conf) == {job_id}


async def test_a_job_reaped_before_its_last_attempt_becomes_a_suspect(conf: Harness) -> None:
    """Another death beside a poison job would dead-letter it: its last attempt runs alone."""
    job_id = await conf.enqueue()
    await reaped_back(conf, max_attempts=2)
    assert await suspects(conf) == {job_id}


async def test_without_suspects_a_claim_leases_the_whole_batch(conf: Harness) -> None:
    ids = await conf.enqueue_many(4)
    result = await conf.queue.claim(10, LEASE_MS)
    assert ids_of(result) == ids
    assert result.suspects == frozenset()


async def test_a_suspect_is_leased_beside_ordinary_jobs_and_named_in_the_reply(
    conf: Harness,
) -> None:
    first, *rest = await conf.enqueue_many(4)
    await mark_suspect(conf, first)
    result = await conf.queue.claim(10, LEASE_MS)
    assert ids_of(result) == [first, *rest]
    assert result.suspects == {first}
    assert await conf.members(conf.keys.pending) == []


async def test_without_suspect_room_a_claim_passes_over_a_suspect_to_the_jobs_behind_it(
    conf: Harness,
) -> None:
    a, b, suspect, d = await conf.enqueue_many(4)
    await mark_suspect(conf, suspect)
    passed = await conf.queue.claim(10, LEASE_MS, suspect_room=0)
    assert (ids_of(passed), passed.suspects) == ([a, b, d], frozenset())
    assert await conf.members(conf.keys.pending) == [suspect]
    assert await conf.field(suspect, "attempts") == b"0"
    assert not passed.offered
    taken = await conf.queue.claim(10, LEASE_MS)
    assert (ids_of(taken), set(taken.suspects)) == ([suspect], {suspect})


async def test_a_claim_counts_only_what_it_leases_against_count(conf: Harness) -> None:
    suspect, b, c = await conf.enqueue_many(3)
    await mark_suspect(conf, suspect)
    result = await conf.queue.claim(2, LEASE_MS, suspect_room=0)
    assert ids_of(result) == [b, c]
    assert await conf.members(conf.keys.pending) == [suspect]


async def test_two_suspects_are_not_leased_together_until_one_has_waited_half_a_lease(
    conf: Harness,
) -> None:
    ids = await conf.enqueue_many(4)
    await mark_suspect(conf, ids[0])
    await mark_suspect(conf, ids[1])
    await mark_suspect(conf, ids[2], waited_ms=LEASE_MS // 2)
    result = await conf.queue.claim(10, LEASE_MS)
    assert ids_of(result) == [ids[0], ids[2], ids[3]]
    assert result.suspects == {ids[0], ids[2]}
    assert await conf.members(conf.keys.pending) == [ids[1]]


async def test_a_suspect_without_a_reap_time_counts_as_waited(conf: Harness) -> None:
    suspect, other = await conf.enqueue_many(2)
    await conf.client.sadd(conf.keys.suspects, suspect)  # as a reaper before reaped_at marked it
    result = await conf.queue.claim(10, LEASE_MS, suspect_room=0)
    assert (ids_of(result), set(result.suspects)) == ([suspect, other], {suspect})


async def test_the_reaper_records_when_it_returned_a_job(conf: Harness) -> None:
    await conf.enqueue()
    before = await server_ms(conf.client)
    job_id = await reaped_back(conf)
    reaped_at = await conf.field(job_id, "reaped_at")
    assert reaped_at is not None
    assert before <= int(reaped_at) <= await server_ms(conf.client)


async def test_a_wrong_typed_suspects_key_fails_the_claim_before_anything_is_popped(
    conf: Harness,
) -> None:
    ids = await conf.enqueue_many(2)
    await conf.client.set(conf.keys.suspects, "not a set")
    try:
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await conf.queue.claim(10, LEASE_MS)
        assert await conf.members(conf.keys.pending) == ids
    finally:  # the session's server is shared: leave no wrong-typed key to other tests
        await conf.client.delete(conf.keys.suspects)


async def test_a_resent_claim_names_the_suspect_again(conf: Harness) -> None:
    suspect, other = await conf.enqueue_many(2)
    await mark_suspect(conf, suspect)
    first = await conf.queue.claim(10, LEASE_MS, "nonce-1")
    again = await conf.queue.claim(10, LEASE_MS, "nonce-1")
    assert (set(first.suspects), set(again.suspects)) == ({suspect}, {suspect})
    assert again.jobs == first.jobs
    assert ids_of(again) == [suspect, other]


async def test_a_limited_reply_names_its_suspect_too(conf: Harness) -> None:
    suspect, _ = await conf.enqueue_many(2)
    await mark_suspect(conf, suspect)
    await conf.client.hset(conf.keys.meta, "concurrency", 1)
    result = await conf.queue.claim(5, LEASE_MS)
    assert result.limited is not None
    assert (result.limited.reason, ids_of(result)) == ("concurrency", [suspect])
    assert result.suspects == {suspect}


@pytest.mark.parametrize("outcome", ["complete", "retry", "dead"])
async def test_settling_a_suspect_clears_the_mark(conf: Harness, outcome: str) -> None:
    suspect, other = await conf.enqueue_many(2)
    await mark_suspect(conf, suspect)
    await conf.client.sadd(conf.keys.suspects, "a-job-that-stays-suspect")
    job = (await conf.queue.claim(1, LEASE_MS)).jobs[0]
    if outcome == "complete":
        await conf.complete(job)
    else:
        await conf.fail(job, delay_ms=0, max_attempts=1 if outcome == "dead" else 5)
    assert await suspects(conf) == {"a-job-that-stays-suspect"}
    assert other in await conf.members(conf.keys.pending)


async def test_settling_a_suspect_while_others_wait_pushes_a_wake_token(conf: Harness) -> None:
    first, second = await conf.enqueue_many(2)
    await mark_suspect(conf, first)
    await mark_suspect(conf, second)
    job = (await conf.queue.claim(10, LEASE_MS)).jobs[0]
    assert await conf.members(conf.keys.pending) == [second]
    await conf.client.delete(conf.keys.wake)
    await conf.complete(job)
    assert await conf.client.llen(conf.keys.wake) == 1
    last = (await conf.queue.claim(10, LEASE_MS)).jobs[0]
    await conf.client.delete(conf.keys.wake)
    await conf.complete(last)  # no suspect left: nobody to wake
    assert await conf.client.llen(conf.keys.wake) == 0


async def test_a_suspect_the_reaper_dead_letters_is_cleared(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await reaped_back(conf, max_attempts=2)
    assert await suspects(conf) == {job_id}
    assert (await conf.queue.claim(10, SHORT_LEASE_MS)).suspects == {job_id}
    await lapse(2 * SHORT_LEASE_MS)
    reaped = await conf.queue.reap(10, 2)
    assert reaped.jobs == ((job_id, "dead"),)
    assert await suspects(conf) == set()


async def test_removing_or_reprocessing_a_suspect_clears_the_mark(conf: Harness) -> None:
    removed, reprocessed = await conf.enqueue_many(2)
    await mark_suspect(conf, removed)
    assert await conf.queue.remove(removed)
    assert await suspects(conf) == set()
    await conf.client.zrem(conf.keys.pending, reprocessed)
    await conf.client.zadd(conf.keys.dead, {reprocessed: 0})
    await mark_suspect(conf, reprocessed)
    await conf.client.hset(conf.keys.job(reprocessed), "reaps", 2)
    assert await conf.queue.reprocess(reprocessed)
    assert await suspects(conf) == set()
    assert await conf.field(reprocessed, "reaps") is None


async def test_a_suspect_whose_row_is_gone_is_dropped_at_claim(conf: Harness) -> None:
    ghost, other = await conf.enqueue_many(2)
    await conf.client.sadd(conf.keys.suspects, ghost)
    await conf.client.delete(conf.keys.job(ghost))
    result = await conf.queue.claim(10, LEASE_MS)
    assert (result.suspects, result.phantoms, ids_of(result)) == (frozenset(), 1, [other])
    assert await suspects(conf) == set()


async def test_a_settle_without_suspects_leaves_the_set_absent(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one()
    assert (await conf.queue.complete(held(job), RECEIPT_MS)).detail == "completed"
    assert not await conf.exists(conf.keys.suspects)


def test_a_trailing_array_in_a_claim_reply_names_the_suspects() -> None:
    reply = [b"ok", 0, b"id1", b"{}", 2, b"id2", b"{}", 1, [b"id1"]]
    result = claim_result("q", "n", reply)
    assert ([job.id for job in result.jobs], set(result.suspects)) == (["id1", "id2"], {"id1"})
    limited = claim_result("q", "n", [b"limited", 0, 0, b"rate", b"id1", b"{}", 2, [b"id1"]])
    assert (limited.limited is not None, set(limited.suspects)) == (True, {"id1"})
    with pytest.raises(ScriptError, match="unexpected claim reply"):
        claim_result("q", "n", [b"solo", 0, b"id1", b"{}", 2])


async def test_a_worker_runs_suspects_beside_ordinary_jobs_but_not_beside_each_other(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """Ten jobs, two of them suspects, on five slots: each suspect starts while ordinary jobs
    run (nothing waits for the worker to empty), and the two suspects never overlap."""
    app = App()
    spans: dict[str, tuple[float, float]] = {}

    @app.task
    async def work(ctx: JobContext) -> None:
        started = time.monotonic()
        await anyio.sleep(0.05)  # the job's work: long enough for neighbours to overlap it
        spans[ctx.job_id] = (started, time.monotonic())

    producer = Producer(client)
    ids = [(await producer.enqueue(queue_name, "work")).job_id for _ in range(10)]
    conf = Harness.of(client, queue_name)
    for suspect in (ids[1], ids[2]):
        await mark_suspect(conf, suspect)
    settings = worker_settings(queue_name, redis_url, concurrency=5)
    async with running_worker(settings, app) as worker:
        await eventually(lambda: _async(worker.counters.completed == 10), what="all ten done")
    (a_from, a_to), (b_from, b_to) = spans[ids[1]], spans[ids[2]]
    assert a_to <= b_from or b_to <= a_from, "two suspects ran side by side"
    for suspect in (ids[1], ids[2]):
        start, end = spans[suspect]
        beside = [
            j for j, (s, e) in spans.items() if j not in (ids[1], ids[2]) and s < end and e > start
        ]
        assert beside, f"suspect {suspect} ran alone: the worker emptied for it"
    assert not await client.exists(producer.queue(queue_name).keys.suspects)


async def _async(value: Any) -> Any:
    await anyio.lowlevel.checkpoint()
    return value


async def test_a_suspect_passed_over_shares_a_worker_once_it_has_waited_half_a_lease(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """One worker, two suspects: the first runs on and holds the worker's suspect room; the
    second is passed over, then leased beside it once it has waited half a lease (the bound on
    how long a suspect waits for another), never sooner."""
    lease_ms, beat_ms = 600, 100
    app = App()
    released = anyio.Event()
    started: dict[str, float] = {}

    @app.task
    async def hold(ctx: JobContext) -> None:
        started[ctx.job_id] = time.monotonic()
        await released.wait()

    producer = Producer(client)
    conf = Harness.of(client, queue_name)
    first = (await producer.enqueue(queue_name, "hold")).job_id
    second = (await producer.enqueue(queue_name, "hold")).job_id
    await mark_suspect(conf, first)
    await mark_suspect(conf, second)
    marked_at = time.monotonic()
    settings = worker_settings(
        queue_name, redis_url, concurrency=5, lease_ms=lease_ms, beat_ms=beat_ms
    )
    async with loop_lag() as lag, running_worker(settings, app):
        await eventually(lambda: _async(second in started), what="the second suspect started")
        assert first in started  # and still runs: its handler waits for `released`
        released.set()
    waited = started[second] - marked_at
    assert waited >= lease_ms / 2000 - 0.05, f"leased beside another after {waited:.3f} s"
    # Half a lease, then the next beat; each beat may come late by the loop lag this run saw.
    beats = lease_ms / 2 / beat_ms + 1
    bound = (lease_ms / 2 + beat_ms) / 1000 + 1.0 + beats * lag.max_s
    assert waited <= bound, (
        f"waited {waited:.3f} s; bound {bound:.3f} s (loop lag {lag.max_s:.3f} s)"
    )


def test_a_suspect_keeps_the_room_until_its_outcome_is_written_not_until_its_handler_returns() -> (
    None
):
    """A second suspect leased while the first one's completion is still unwritten may be the
    poison: it kills the process, the first one's completion dies with it, and that good job,
    reaped a third time, is dead-lettered (tests/chaos/test_poison.py at load 15 on Redis)."""
    book = LeaseBook()
    suspects = HeldSuspects(book)
    job = ClaimedJob("q", JobId("JOB00000000001"), b"{}", Token(3), "nonce")
    lease = Lease(job=job, confirmed_at=0.0, started=True)
    book.add(lease)
    suspects.add(lease)
    assert suspects.room() == 0
    book.mark_settling(lease)  # the handler returned; its completion waits in the batch
    assert suspects.room() == 0
    book.discard(lease)  # the completion is written
    assert suspects.room() == 1
