"""Dead-lettering fences the last holder: when one of our paths moves a job to `dead`, a late
complete, retry, delay or renew from the holder of its last token, EchoMQ's scripts (which check
the token, never the state) or ours, is refused, so `dead` never keeps an id whose row is gone and
a dead job is never counted completed as well."""

from __future__ import annotations

from redis.asyncio import Redis

from emq_worker.admin import dead_letter
from emq_worker.protocol.names import JobId
from emq_worker.protocol.replies import text
from emq_worker.testing import outcome
from tests.interop.echomq import Claimed, EchoMQ
from tests.interop.echomq.lanes import EchoLanes
from tests.support.conformance import Harness, lapse

ECHOMQ_LEASE_MS = 150


async def reaped_dead_under_echomq(conf: Harness, emq: EchoMQ) -> Claimed:
    """EchoMQ claims with a short lease and stalls past it; our reaper (max attempts 1) takes
    the job at the cap: EchoMQ's holder still has token 1."""
    job_id = conf.mint()
    assert await emq.enqueue(job_id, b"opaque")
    job = await emq.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert (await conf.queue.reap(10, 1)).jobs == ((job_id, "dead"),)
    return job


async def still_dead(conf: Harness, job_id: JobId) -> None:
    """The row is intact and dead, its id in `dead`, and only metrics:failed counted it."""
    assert await conf.field(job_id, "state") == b"dead"
    assert await conf.members(conf.keys.dead) == [job_id]
    assert await conf.members(conf.keys.active) == []
    assert (await conf.metric("completed"))[0] == 0
    assert (await conf.metric("failed"))[0] == 1


async def test_echomq_late_complete_of_a_job_we_reaped_dead_is_refused(
    conf: Harness, emq: EchoMQ
) -> None:
    job = await reaped_dead_under_echomq(conf, emq)
    assert await emq.complete(job.id, job.token) == "stale"
    await still_dead(conf, JobId(job.id))
    assert (await conf.queue.counts()).dead == 1


async def test_echomq_late_retry_and_delay_of_a_job_we_reaped_dead_are_refused(
    conf: Harness, emq: EchoMQ
) -> None:
    job = await reaped_dead_under_echomq(conf, emq)
    assert await emq.retry(job.id, job.token, delay_ms=0, max_attempts=1, error="x") == "stale"
    assert await emq.delay(job.id, job.token, 10) == "stale"
    await still_dead(conf, JobId(job.id))
    assert await conf.members(conf.keys.schedule) == []


async def test_echomq_renew_no_longer_puts_a_dead_job_back_in_active(
    conf: Harness, emq: EchoMQ
) -> None:
    job = await reaped_dead_under_echomq(conf, emq)
    assert await emq.extend_locks([(job.id, job.token)], 30_000) == [job.id]
    await still_dead(conf, JobId(job.id))


async def test_a_grouped_job_reaped_dead_refuses_echomq_late_complete(
    conf: Harness, emq: EchoMQ
) -> None:
    lanes = EchoLanes(emq)
    job_id = conf.mint()
    assert await lanes.enqueue("g", job_id, b"opaque")
    job = await lanes.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert (await conf.queue.reap(10, 1)).jobs == ((job_id, "dead"),)
    assert await emq.complete(job.id, job.token) == "stale"
    await still_dead(conf, job_id)


async def test_a_job_our_holder_settled_dead_refuses_a_write_with_its_token(
    conf: Harness, emq: EchoMQ
) -> None:
    """The settle's dead branch (max attempts, a timeout, an operator cancel) fences the token
    it retires: EchoMQ's complete with it no longer deletes the dead row."""
    (job_id,) = await conf.enqueue_many(1)
    job = await conf.claim_one()
    assert (await conf.fail(job, max_attempts=1)).detail == "dead"
    assert await emq.complete(job_id, job.token) == "stale"
    await still_dead(conf, job_id)
    # The holder's own re-sent settle still reads its receipt.
    assert (await conf.fail(job, max_attempts=1)).status == "settled"


async def test_our_late_holder_of_a_job_reaped_dead_is_refused(conf: Harness) -> None:
    (job_id,) = await conf.enqueue_many(1)
    job = await conf.claim_one(lease_ms=ECHOMQ_LEASE_MS)
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert (await conf.queue.reap(10, 1)).jobs == ((job_id, "dead"),)
    assert (await conf.complete(job)).status == "stale"
    await still_dead(conf, job_id)


async def test_the_fence_spends_no_attempt_of_a_retried_dead_job(
    client: Redis, conf: Harness, emq: EchoMQ
) -> None:
    """attempts rises with attempts_base: `dead retry` then gives the job its whole budget
    again, EchoMQ's reprocess and claim still work, and the reason names the attempt that ran."""
    job = await reaped_dead_under_echomq(conf, emq)
    job_id = JobId(job.id)
    assert await conf.field(job_id, "last_error") == (
        b"lease expired on attempt 1 (max_attempts 1)"
    )
    assert (await conf.field(job_id, "attempts"), await conf.field(job_id, "attempts_base")) == (
        b"2",
        b"1",
    )
    assert (await dead_letter.retry_dead(conf.queue, [job_id])).done == 1
    again = await conf.claim_one()
    assert again.token == 3
    assert (await conf.fail(again, max_attempts=2)).detail == "scheduled"
    assert await emq.reprocess(job_id) == "state"  # not dead: its retry is ours to run


async def test_readers_show_the_attempts_that_ran_not_the_raised_token(
    conf: Harness, emq: EchoMQ
) -> None:
    job = await reaped_dead_under_echomq(conf, emq)
    job_id = JobId(job.id)
    assert await conf.field(job_id, "fenced") == b"2"
    assert [(d.id, d.attempts) for d in await dead_letter.list_dead(conf.queue, 10)] == [
        (job_id, 1)
    ]
    assert (await outcome(conf.queue, job_id)).attempts == 1
    # EchoMQ's reprocess keeps attempts and `fenced`; its next claim moves attempts past it.
    assert await emq.reprocess(job_id) == "ok"
    again = await emq.claim(ECHOMQ_LEASE_MS)
    assert again is not None
    assert again.token == 3
    assert (await outcome(conf.queue, job_id)).attempts == 3


async def test_echomq_complete_of_a_grouped_job_we_returned_takes_it_out_of_its_lane(
    conf: Harness, emq: EchoMQ
) -> None:
    """The restatement check behind the tests above: EchoMQ's Jobs.complete runs one script
    that reads the row's group, so a late complete of a grouped job our reaper returned to its
    lane leaves no member there (a flat-only restatement would look in `pending`)."""
    lanes = EchoLanes(emq)
    job_id = conf.mint()
    assert await lanes.enqueue("g", job_id, b"opaque")
    job = await lanes.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert (await conf.queue.reap(10, 5)).jobs == ((job_id, "pending"),)
    assert await lanes.depth("g") == 1
    assert await emq.complete(job.id, job.token) == "ok"  # late but uncontested
    assert await lanes.depth("g") == 0
    assert await conf.row(job_id) == {}
    ring = await conf.client.lrange(conf.keys.prefix + "ring", 0, -1)
    assert "g" not in [text(member) for member in ring]
