"""A `dead` member whose row is gone: our dead-lettering fences the last holder out (see
test_dead_letter_fence.py), but EchoMQ's own stalled sweep dead-letters without a fence, and its
late `complete` checks the token, not the state, so it is accepted: it deletes the row but leaves
the id in `dead`. Our verbs must clean such a member (a member whose row is gone)."""

from __future__ import annotations

from redis.asyncio import Redis

from emq_worker.admin import dead_letter, verbs
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from tests.interop.echomq import EchoMQ
from tests.support.conformance import Harness, lapse

ECHOMQ_LEASE_MS = 150


async def dead_after_a_late_echomq_complete(conf: Harness, emq: EchoMQ) -> JobId:
    """EchoMQ claims with a 150 ms lease; its stalled sweep dead-letters it; EchoMQ completes."""
    job_id = conf.mint()
    assert await emq.enqueue(job_id, b"opaque")
    job = await emq.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    assert job.id == job_id
    await lapse(2 * ECHOMQ_LEASE_MS)
    assert await emq.stalled() == ([], [job_id])
    assert await emq.complete(job.id, job.token) == "ok"  # the token still matches
    # The seam: the row is gone, the member stays, and both counters counted the job.
    assert await conf.row(job_id) == {}
    assert await conf.members(conf.keys.dead) == [job_id]
    assert (await conf.metric("completed"))[0] == 1
    assert (await conf.metric("failed"))[0] == 1
    return job_id


async def no_member_left(queue: Queue, job_id: JobId) -> None:
    assert await queue.state_of(job_id) == "absent"
    assert (await queue.counts()).dead == 0


async def test_remove_cleans_a_dead_member_whose_row_is_gone(conf: Harness, emq: EchoMQ) -> None:
    job_id = await dead_after_a_late_echomq_complete(conf, emq)
    await verbs.remove_job(conf.queue, job_id)
    await no_member_left(conf.queue, job_id)


async def test_dead_purge_all_cleans_it(conf: Harness, emq: EchoMQ) -> None:
    job_id = await dead_after_a_late_echomq_complete(conf, emq)
    result = await dead_letter.purge_dead(conf.queue, None)
    assert (result.done, result.skipped) == (1, [])
    await no_member_left(conf.queue, job_id)


async def test_dead_purge_by_name_cleans_it(conf: Harness, emq: EchoMQ) -> None:
    job_id = await dead_after_a_late_echomq_complete(conf, emq)
    result = await dead_letter.purge_dead(conf.queue, [job_id])
    assert (result.done, result.skipped) == (1, [])
    await no_member_left(conf.queue, job_id)


async def test_reprocess_cleans_it_and_says_the_job_is_gone(conf: Harness, emq: EchoMQ) -> None:
    job_id = await dead_after_a_late_echomq_complete(conf, emq)
    result = await dead_letter.retry_dead(conf.queue, [job_id])
    assert result.done == 0
    assert [why for _, why in result.skipped] == ["absent"]
    await no_member_left(conf.queue, job_id)


async def test_a_clean_removal_still_answers_gone(client: Redis, conf: Harness) -> None:
    """Nothing to remove at all (no row, no member) is still "gone", not success."""
    assert await conf.queue.remove(conf.mint()) is False
