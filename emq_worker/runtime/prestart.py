"""The pre-start lease check: a job whose lease was last confirmed more than half a lease ago
(a worker frozen between the claim, or the hand-off, and the handler's start), or is past its
local deadline (a claim whose request spent longer than that in a cut network and was answered
after the heal), renews that one lease before its handler starts; a lease found lost is dropped
unstarted, and so is one past its local deadline whose check fails (the server may reap it).

A handler that starts promptly pays nothing: the check costs one round trip only past the
threshold. Half a lease is safe: a lease confirmed less than a lease ago cannot have been reaped
(its deadline has not passed), and the renewal sweep confirms every held lease each lease / 3, so
only a worker that stalled (SIGSTOP, a blocked loop) finds a job that old unstarted.
"""

from __future__ import annotations

from emq_worker.observe.log import get_logger
from emq_worker.protocol.queue import Queue
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.renewal import CANCEL
from emq_worker.valkey.failures import RETRYABLE, describe, fatal

CHECK_AFTER_SHARE = 2
"""A lease older than lease_ms / CHECK_AFTER_SHARE at the handler's start is confirmed first."""


def past_local_deadline(lease: Lease, settings: WorkerSettings, now: float) -> bool:
    """Whether no confirmed renewal covers `lease` for the lease less the stop margin: the
    local deadline the self-fence gives a running handler up at (deadlines.py)."""
    return now >= lease.confirmed_at + (settings.lease_ms - settings.stop_margin) / 1000


def needs_check(lease: Lease, settings: WorkerSettings, now: float) -> bool:
    return (
        now - lease.confirmed_at > settings.lease_ms / 1000 / CHECK_AFTER_SHARE
        or past_local_deadline(lease, settings, now)
    )


async def still_held(lease: Lease, queue: Queue, settings: WorkerSettings, now: float) -> bool:
    """Renew `lease` alone; False when the server says it is no longer ours. A failed renew
    lets the handler start while the lease is within its local deadline (the renewal sweep and
    the self-fence judge it as before), not past it; a cancel request is recorded on the lease
    (the runner settles the job dead unstarted)."""
    job = lease.job
    try:
        lost = await queue.renew([lease.held], settings.lease_ms)
    except RETRYABLE as exc:
        if fatal(exc):
            raise
        expired = past_local_deadline(lease, settings, now)
        get_logger().warning(
            "prestart_check_failed",
            queue=job.queue,
            job_id=job.id,
            error=describe(exc),
            **({"dropped": "past its local deadline"} if expired else {}),
        )
        return not expired
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
