"""One timer for every job's timeout (runtime/timeouts.py): a job past its timeout is stopped, one
that ended in time never is, and emptied buckets never hold back a live one."""

from __future__ import annotations

import asyncio

import pytest

from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.runtime import timeouts as timeouts_module
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.timeouts import STALE_POPS, JobTimeouts


def lease(n: int) -> Lease:
    job = ClaimedJob("q", JobId(f"JOB{n:011d}"), b"{}", Token(1), "nonce")
    return Lease(job=job, confirmed_at=0.0)


async def running(held: Lease) -> asyncio.Task[None]:
    """A task standing for the job's: it waits until cancelled."""

    async def job() -> None:
        await asyncio.Event().wait()

    task = asyncio.get_running_loop().create_task(job())
    held.task = task
    await asyncio.sleep(0)  # (it has started)
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    """Until `task` ends (a timeout stops it), or fail after 5 s."""
    await asyncio.wait({task}, timeout=5)
    assert task.done()


async def test_a_job_past_its_timeout_is_stopped_and_no_longer_watched() -> None:
    timeouts = JobTimeouts()
    late = lease(1)
    task = await running(late)
    timeouts.start(late, 0.02)
    await stopped(task)
    assert late.timed_out
    assert task.cancelled()
    assert len(timeouts) == 0


async def test_a_job_that_ended_in_time_is_never_stopped() -> None:
    timeouts = JobTimeouts()
    quick, late = lease(1), lease(2)
    quick_task, late_task = await running(quick), await running(late)
    bucket = timeouts.start(quick, 0.02)
    timeouts.start(late, 0.04)
    timeouts.stop(quick, bucket)
    await stopped(late_task)
    assert (quick.timed_out, quick_task.done()) == (False, False)
    assert late.timed_out
    quick_task.cancel()


async def test_a_backlog_of_emptied_buckets_does_not_hold_back_a_live_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs that finished in time leave their bucket times in the heap; the timer clears them a
    slice at a time and still stops the job that is late (ticks of 10 us here, so that thousands
    of buckets fall due before it)."""
    monkeypatch.setattr(timeouts_module, "TICK_S", 1e-5)
    timeouts = JobTimeouts()
    for n in range(3 * STALE_POPS):
        done = lease(n)
        timeouts.stop(done, timeouts.start(done, n * 1e-5))
    late = lease(-1)
    task = await running(late)
    timeouts.start(late, 0.06)
    await stopped(task)
    assert late.timed_out
    assert len(timeouts) == 0
