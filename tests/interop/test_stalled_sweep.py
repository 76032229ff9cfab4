"""Seam 3: EchoMQ's stalled sweep (default max_stalled 1) dead-letters one of our leases on its
first lapse and leaves our :lock subkey. A lock in our `<attempts>:<nonce>` form on a row that
is not active names a lapsed claim: our verbs remove, purge and reprocess such a job."""

from __future__ import annotations

import pytest

from emq_worker.admin import dead_letter, verbs
from emq_worker.protocol.names import JobId
from tests.interop.echomq import EchoMQ
from tests.support.conformance import Harness, lapse

OUR_LEASE_MS = 1_000
"""Our lock lives 2 x the lease: the sweep and the read of the lock must come within a lease after
the lapse. At 100 ms, a loaded machine's stall of over 70 ms let the lock expire first."""


async def stalled_dead(conf: Harness, emq: EchoMQ) -> JobId:
    job_id = await conf.enqueue(b'{"task":"t"}')
    job = await conf.claim_one(OUR_LEASE_MS)
    await lapse(OUR_LEASE_MS + 30)  # past the lease, well before the lock PX of 2 x lease
    assert await emq.stalled() == ([], [job_id])
    row = await conf.row(job_id)
    assert (row[b"state"], row[b"last_error"], row[b"stalled"]) == (b"dead", b"stalled", b"1")
    lock = await conf.client.get(conf.keys.lock(job_id))
    assert lock == f"{job.token}:{job.nonce}".encode()  # our lock, left behind
    return job_id


async def test_dead_purge_removes_a_job_the_stalled_sweep_dead_lettered(
    conf: Harness, emq: EchoMQ
) -> None:
    job_id = await stalled_dead(conf, emq)
    result = await dead_letter.purge_dead(conf.queue, None)
    assert (result.done, result.skipped) == (1, [])
    assert await conf.queue.state_of(job_id) == "absent"
    assert not await conf.exists(conf.keys.lock(job_id))


async def test_remove_removes_it(conf: Harness, emq: EchoMQ) -> None:
    job_id = await stalled_dead(conf, emq)
    await verbs.remove_job(conf.queue, job_id)
    assert await conf.queue.state_of(job_id) == "absent"


async def test_reprocess_drops_the_lapsed_lock_so_echomq_can_remove_it_again(
    conf: Harness, emq: EchoMQ
) -> None:
    job_id = await stalled_dead(conf, emq)
    assert await conf.queue.reprocess(job_id)
    assert not await conf.exists(conf.keys.lock(job_id))
    assert await emq.remove_job(job_id) == "ok"


async def test_a_live_lock_of_ours_still_refuses(conf: Harness, emq: EchoMQ) -> None:
    """The rule is about lapsed claims only: an active job we hold is still refused."""
    job_id = await conf.enqueue()
    await conf.claim_one()
    with pytest.raises(verbs.JobHeldError):
        await verbs.remove_job(conf.queue, job_id)
    assert await conf.queue.state_of(job_id) == "active"


async def test_another_clients_marker_on_a_pending_job_still_refuses(conf: Harness) -> None:
    """EchoMQ's conformance remove_job: a raw marker `worker-1` refuses (EMQLOCK)."""
    job_id = await conf.enqueue()
    await conf.client.set(conf.keys.lock(job_id), "worker-1")
    with pytest.raises(verbs.JobHeldError):
        await verbs.remove_job(conf.queue, job_id)
    assert await conf.queue.state_of(job_id) == "pending"
