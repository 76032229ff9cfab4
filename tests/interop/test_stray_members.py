"""Seam 2: EchoMQ's renew-many re-adds a job our reaper already took back (D1: ZADD without XX),
and its delay after a reap leaves the job in pending too (D8). A set member whose row's state
names another set is a stray: the reaper and promote drop it, uncounted, instead of moving the
job a second time."""

from __future__ import annotations

from emq_worker.protocol.values import OfferTerms
from tests.interop.echomq import EchoMQ
from tests.support.conformance import LEASE_MS, Harness, lapse

ECHOMQ_LEASE_MS = 100


async def echomq_lease_reaped(conf: Harness, emq: EchoMQ, max_attempts: int) -> tuple[str, int]:
    job_id = conf.mint()
    assert await emq.enqueue(job_id, b"opaque")
    job = await emq.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert len((await conf.queue.reap(10, max_attempts)).jobs) == 1
    return job_id, job.token


async def test_a_dead_job_renewed_back_into_active_is_not_dead_lettered_twice(
    conf: Harness, emq: EchoMQ
) -> None:
    """EchoMQ's own stalled sweep dead-letters without fencing its holder out (ours raises
    attempts: test_dead_letter_fence.py), so its renew-many still re-adds the dead job."""
    job_id = conf.mint()
    assert await emq.enqueue(job_id, b"opaque")
    job = await emq.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert await emq.stalled() == ([], [job_id])
    assert await emq.extend_locks([(job_id, job.token)], ECHOMQ_LEASE_MS) == []  # D1: accepted
    assert await conf.score(conf.keys.active, job_id) is not None
    await lapse(2 * ECHOMQ_LEASE_MS)
    reaped = await conf.queue.reap(10, 1)
    assert (reaped.returned, reaped.dead, reaped.jobs) == (0, 0, ())
    assert (await conf.metric("failed"))[0] == 1
    assert await conf.field(job_id, "last_error") == b"stalled"
    assert await conf.score(conf.keys.active, job_id) is None
    assert await conf.members(conf.keys.dead) == [job_id]


async def test_a_pending_job_renewed_back_into_active_is_not_reaped_twice(
    conf: Harness, emq: EchoMQ
) -> None:
    job_id, token = await echomq_lease_reaped(conf, emq, max_attempts=5)
    assert await emq.extend_locks([(job_id, token)], ECHOMQ_LEASE_MS) == []
    await lapse(2 * ECHOMQ_LEASE_MS)
    reaped = await conf.queue.reap(10, 5)
    assert (reaped.returned, reaped.jobs) == (0, ())
    assert await conf.field(job_id, "reaps") == b"1"
    assert not await conf.client.sismember(conf.keys.suspects, job_id)
    assert await conf.score(conf.keys.active, job_id) is None
    assert await conf.members(conf.keys.pending) == [job_id]


async def test_promote_leaves_a_job_we_hold_that_echomq_also_delayed(
    conf: Harness, emq: EchoMQ
) -> None:
    """EchoMQ's delay after a reap puts a pending job in schedule too; we claim it from pending;
    promote must not return our running job to pending when the delay falls due."""
    job_id, token = await echomq_lease_reaped(conf, emq, max_attempts=5)
    assert await emq.delay(job_id, token, 50) == "ok"
    mine = (await conf.queue.claim(1, LEASE_MS, offer=OfferTerms())).jobs
    assert [job.id for job in mine] == [job_id]
    await lapse(100)
    promoted = await conf.queue.promote(10)
    assert promoted.promoted == 0
    assert await conf.field(job_id, "state") == b"active"
    assert await conf.members(conf.keys.pending) == []
    assert await conf.members(conf.keys.schedule) == []
    assert (await conf.complete(mine[0])).detail == "completed"
    assert await conf.row(job_id) == {}
