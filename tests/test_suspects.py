"""Suspects: a job whose lease the reaper took back (its holder died or froze while running it)
is claimed alone ('solo') and run with nothing beside it, so a job that kills its process takes
no other job with it. Scripts against a real redis-server, then one worker end to end."""

from __future__ import annotations

import time
from typing import Any, cast

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker import App, JobContext, Producer
from emq_worker.admin.verbs import cancel_job
from emq_worker.beat.runner import CANCELLED
from emq_worker.errors import ScriptError
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import claim_result
from tests.support.conformance import LEASE_MS, RECEIPT_MS, Harness, held, lapse
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


async def mark_suspect(conf: Harness, job_id: str) -> None:
    """What reap does to a job it returns to pending a second time (shown by the tests below)."""
    await conf.client.sadd(conf.keys.suspects, job_id)


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
    assert [job.id for job in result.jobs] == ids
    assert not result.solo


async def test_a_suspect_popped_first_is_leased_alone_and_the_rest_keep_their_order(
    conf: Harness,
) -> None:
    first, *rest = await conf.enqueue_many(4)
    await mark_suspect(conf, first)
    result = await conf.queue.claim(10, LEASE_MS)
    assert result.solo
    assert [job.id for job in result.jobs] == [first]
    assert await conf.members(conf.keys.pending) == rest
    assert await conf.members(conf.keys.active) == [first]
    assert [await conf.field(job_id, "attempts") for job_id in rest] == [b"0"] * 3


async def test_a_claim_stops_before_a_later_suspect(conf: Harness) -> None:
    a, b, suspect, d = await conf.enqueue_many(4)
    await mark_suspect(conf, suspect)
    before = await conf.queue.claim(10, LEASE_MS)
    assert [job.id for job in before.jobs] == [a, b]
    assert not before.solo
    assert await conf.members(conf.keys.pending) == [suspect, d]
    alone = await conf.queue.claim(10, LEASE_MS)
    assert (alone.solo, [job.id for job in alone.jobs]) == (True, [suspect])
    assert await conf.members(conf.keys.pending) == [d]
    after = await conf.queue.claim(10, LEASE_MS)
    assert (after.solo, [job.id for job in after.jobs]) == (False, [d])


async def test_the_jobs_put_back_are_announced_with_wake_tokens(conf: Harness) -> None:
    suspect, *_ = await conf.enqueue_many(4)
    await conf.client.delete(conf.keys.wake)
    await mark_suspect(conf, suspect)
    assert (await conf.queue.claim(10, LEASE_MS)).solo
    assert await conf.client.llen(conf.keys.wake) == 3


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


async def test_two_suspects_are_never_leased_together(conf: Harness) -> None:
    ids = await conf.enqueue_many(3)
    for job_id in ids[:2]:
        await mark_suspect(conf, job_id)
    first = await conf.queue.claim(10, LEASE_MS)
    second = await conf.queue.claim(10, LEASE_MS)
    third = await conf.queue.claim(10, LEASE_MS)
    assert [(r.solo, [j.id for j in r.jobs]) for r in (first, second, third)] == [
        (True, [ids[0]]),
        (True, [ids[1]]),
        (False, [ids[2]]),
    ]


async def test_a_resent_claim_returns_the_suspect_again_as_solo(conf: Harness) -> None:
    suspect, other = await conf.enqueue_many(2)
    await mark_suspect(conf, suspect)
    first = await conf.queue.claim(10, LEASE_MS, "nonce-1")
    again = await conf.queue.claim(10, LEASE_MS, "nonce-1")
    assert (first.solo, again.solo) == (True, True)
    assert again.jobs == first.jobs
    assert [job.id for job in again.jobs] == [suspect]
    assert await conf.members(conf.keys.pending) == [other]


async def test_solo_wins_over_a_concurrency_limit_that_bound_the_claim(conf: Harness) -> None:
    suspect, _ = await conf.enqueue_many(2)
    await mark_suspect(conf, suspect)
    await conf.client.hset(conf.keys.meta, "concurrency", 1)
    result = await conf.queue.claim(5, LEASE_MS)
    assert (result.solo, result.limited, [job.id for job in result.jobs]) == (True, None, [suspect])
    refused = await conf.queue.claim(5, LEASE_MS)
    assert refused.limited is not None
    assert (refused.limited.reason, refused.solo, refused.jobs) == ("concurrency", False, ())


@pytest.mark.parametrize("outcome", ["complete", "retry", "dead"])
async def test_settling_a_suspect_clears_the_mark(conf: Harness, outcome: str) -> None:
    suspect, other = await conf.enqueue_many(2)
    await mark_suspect(conf, suspect)
    await mark_suspect(conf, "a-job-that-stays-suspect")
    job = (await conf.queue.claim(10, LEASE_MS)).jobs[0]
    if outcome == "complete":
        await conf.complete(job)
    else:
        await conf.fail(job, delay_ms=0, max_attempts=1 if outcome == "dead" else 5)
    assert await suspects(conf) == {"a-job-that-stays-suspect"}
    assert other in await conf.members(conf.keys.pending)


async def test_a_suspect_the_reaper_dead_letters_is_cleared(conf: Harness) -> None:
    job_id = await conf.enqueue()
    await reaped_back(conf, max_attempts=2)
    assert await suspects(conf) == {job_id}
    assert (await conf.queue.claim(10, SHORT_LEASE_MS)).solo
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
    await mark_suspect(conf, ghost)
    await conf.client.delete(conf.keys.job(ghost))
    result = await conf.queue.claim(10, LEASE_MS)
    assert (result.solo, result.phantoms, result.jobs) == (False, 1, ())
    assert await suspects(conf) == set()
    assert await conf.members(conf.keys.pending) == [other]


async def test_a_settle_without_suspects_leaves_the_set_absent(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one()
    assert (await conf.queue.complete(held(job), RECEIPT_MS)).detail == "completed"
    assert not await conf.exists(conf.keys.suspects)


def test_a_solo_reply_must_hold_exactly_one_job() -> None:
    one = [b"solo", 0, b"id1", b"{}", 2]
    assert claim_result("q", "n", one).solo
    with pytest.raises(ScriptError, match="exactly one job"):
        claim_result("q", "n", [b"solo", 0, *one[2:], b"id2", b"{}", 1])
    with pytest.raises(ScriptError, match="exactly one job"):
        claim_result("q", "n", [b"solo", 0])
    with pytest.raises(ScriptError, match="unexpected claim reply"):
        claim_result("q", "n", [b"maybe", 0])


async def test_a_worker_runs_a_suspect_with_nothing_else_beside_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """Three jobs run when the suspect is claimed: it waits for them, then runs alone, and
    nothing else starts until it has returned."""
    app = App()
    spans: dict[str, tuple[float, float]] = {}

    @app.task
    async def work(ctx: JobContext) -> None:
        started = time.monotonic()
        await anyio.sleep(0.05)  # the job's work: long enough for neighbours to overlap it
        spans[ctx.job_id] = (started, time.monotonic())

    producer = Producer(client)
    ids = [(await producer.enqueue(queue_name, "work")).job_id for _ in range(10)]
    suspect = ids[3]
    await client.sadd(producer.queue(queue_name).keys.suspects, suspect)
    settings = worker_settings(queue_name, redis_url, concurrency=5)
    async with running_worker(settings, app) as worker:
        await eventually(lambda: _async(worker.counters.completed == 10), what="all ten done")
    alone_from, alone_to = spans[suspect]
    overlapping = [
        job_id
        for job_id, (start, end) in spans.items()
        if job_id != suspect and start < alone_to and end > alone_from
    ]
    assert overlapping == []
    assert all(spans[job_id][1] <= alone_from for job_id in ids[:3])
    assert not await client.exists(producer.queue(queue_name).keys.suspects)


async def test_a_suspect_cancelled_while_it_waits_is_dead_lettered_without_running(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    released = anyio.Event()
    ran: list[str] = []

    @app.task
    async def hold(ctx: JobContext) -> None:
        ran.append(ctx.job_id)
        await released.wait()

    producer = Producer(client)
    queue = producer.queue(queue_name)
    running = (await producer.enqueue(queue_name, "hold")).job_id
    suspect = (await producer.enqueue(queue_name, "hold")).job_id
    await client.sadd(queue.keys.suspects, suspect)
    settings = worker_settings(queue_name, redis_url, concurrency=2)
    async with running_worker(settings, app):
        # The suspect is claimed ('solo') and waits, its lease held, behind the running job.
        await eventually(lambda: _both_active(queue, running, suspect), what="both leased")
        await cancel_job(queue, suspect)
        await eventually(lambda: _state_is(queue, suspect, "dead"), what="suspect dead")
        released.set()
        await eventually(lambda: _state_is(queue, running, "absent"), what="completion")
    assert ran == [running]
    row = await queue.get_job(suspect)
    assert row is not None
    assert row["last_error"] == CANCELLED
    assert not await client.exists(queue.keys.suspects)


async def _both_active(queue: Queue, *ids: JobId) -> bool:
    return all([await queue.state_of(job_id) == "active" for job_id in ids])


async def _state_is(queue: Queue, job_id: JobId, state: str) -> bool:
    return await queue.state_of(job_id) == state


async def _async(value: Any) -> Any:
    await anyio.lowlevel.checkpoint()
    return value
