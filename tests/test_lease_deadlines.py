"""The local deadlines' timer and the stop margin setting: a lease is given up at confirmed send
time + lease - margin, by one timer, and a renewal that moved it on keeps it."""

from __future__ import annotations

import time

import anyio
import pytest

from emq_worker import WorkerSettings
from emq_worker.errors import ConfigError
from emq_worker.observe.clock import MonotonicClock
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.runtime.deadlines import LocalDeadlines
from emq_worker.runtime.lease import Lease, LeaseBook
from tests.support.wait import until

LEASE_S, MARGIN_S = 0.3, 0.05


def a_lease(n: int, confirmed_at: float) -> Lease:
    """A lease whose handler runs (an unstarted one is left to the pre-start check)."""
    job = ClaimedJob("q", JobId(f"JOB{n:011d}"), b"{}", Token(1), "nonce")
    return Lease(job=job, confirmed_at=confirmed_at, started=True)


@pytest.mark.parametrize(
    ("lease_ms", "renew_every_ms", "margin_ms"),
    [(1_500, 500, 100), (30_000, 0, 1_500), (600, 200, 100), (300, 100, 50), (60_000, 0, 3_000)],
)
def test_the_derived_stop_margin_is_5_percent_of_the_lease_at_least_100_ms_at_most_half_a_tick(
    lease_ms: int, renew_every_ms: int, margin_ms: int
) -> None:
    settings = WorkerSettings(("q",), lease_ms=lease_ms, renew_every_ms=renew_every_ms)
    assert settings.stop_margin == margin_ms


def test_a_stop_margin_that_would_give_up_a_lease_renewed_one_tick_late_is_refused() -> None:
    assert WorkerSettings(("q",), lease_ms=1_500, stop_margin_ms=500).stop_margin == 500
    with pytest.raises(ConfigError, match=r"at most lease_ms - 2 x .*got stop_margin_ms=501"):
        WorkerSettings(("q",), lease_ms=1_500, stop_margin_ms=501)
    with pytest.raises(ConfigError, match="stop_margin_ms must be an integer >= 0; got -1"):
        WorkerSettings(("q",), stop_margin_ms=-1)


async def test_each_lease_is_given_up_at_its_own_local_deadline_unless_a_renewal_moved_it() -> None:
    clock = MonotonicClock()
    book = LeaseBook()
    expired: dict[str, float] = {}

    def expire(lease: Lease, now: float) -> None:
        expired[lease.job.id] = now
        book.discard(lease)

    deadlines = LocalDeadlines(book, clock, LEASE_S, MARGIN_S, expire)
    book.on_add = deadlines.watch
    start = clock.monotonic()
    late, early, renewed, settled = (a_lease(n, start - n * 0.05) for n in range(4))
    for lease in (late, early, renewed, settled):
        book.add(lease)
    book.discard(settled)
    renewed.confirmed_at = start + 0.1  # a renewal answered: its deadline moved on
    try:
        with anyio.fail_after(5):
            await until(lambda: len(expired) == 3, what="three leases given up")
    finally:
        deadlines.close()
    assert settled.job.id not in expired
    for lease in (late, early):
        assert expired[lease.job.id] >= lease.confirmed_at + LEASE_S - MARGIN_S
    assert expired[early.job.id] < expired[late.job.id]
    assert expired[renewed.job.id] >= start + 0.1 + LEASE_S - MARGIN_S
    assert time.monotonic() - start < 1.0
