"""The pre-start lease check: a job whose lease was last confirmed more than half a lease ago
(a worker frozen between the claim, or the hand-off, and the handler's start) renews that one
lease before its handler starts; a lease found lost is dropped unstarted.

A handler that starts promptly pays nothing: the check costs one round trip only past the
threshold. Half a lease is safe: a lease confirmed less than a lease ago cannot have been reaped
(its deadline has not passed), and the renewal sweep confirms every held lease each lease / 3, so
only a worker that stalled (SIGSTOP, a blocked loop) finds a job that old unstarted.
"""

from __future__ import annotations

from emq_worker.observe.log import get_logger
from emq_worker.protocol.queue import Queue
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.renewal import CANCEL
from emq_worker.valkey.failures import RETRYABLE, describe, fatal

CHECK_AFTER_SHARE = 2
"""A lease older than lease_ms / CHECK_AFTER_SHARE at the handler's start is confirmed first."""


def needs_check(lease: Lease, lease_ms: int, now: float) -> bool:
    return now - lease.confirmed_at > lease_ms / 1000 / CHECK_AFTER_SHARE


async def still_held(lease: Lease, queue: Queue, lease_ms: int, now: float) -> bool:
    """Renew `lease` alone; False when the server says it is no longer ours. A failed renew
    lets the handler start (the renewal sweep and the self-fence judge the lease as before); a
    cancel request is recorded on the lease (the runner settles the job dead unstarted)."""
    job = lease.job
    try:
        lost = await queue.renew([lease.held], lease_ms)
    except RETRYABLE as exc:
        if fatal(exc):
            raise
        get_logger().warning(
            "prestart_check_failed", queue=job.queue, job_id=job.id, error=describe(exc)
        )
        return True
    if not lost:
        lease.confirmed_at = max(lease.confirmed_at, now)
        return True
    if lost[0].current == CANCEL:
        lease.confirmed_at = max(lease.confirmed_at, now)
        lease.cancel_requested = True
        return True
    get_logger().warning(
        "job_not_started",
        queue=job.queue,
        job_id=job.id,
        attempts=job.token,
        current=lost[0].current or "gone",
        waited_ms=int((now - lease.confirmed_at) * 1000),
        reason="lease lost before the handler started",
    )
    return False
