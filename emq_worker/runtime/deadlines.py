"""Local lease deadlines: a held lease whose renewal has not been confirmed in time is given up by
one event-loop timer, at its own deadline, not at the end of some renewal tick.

A lease's local deadline is the send time (monotonic) of the last claim or renewal the server
confirmed, plus the lease, minus the stop margin (settings.stop_margin). The server scored the
lease when that call *arrived*, which is no earlier than it was sent, so the server cannot reap
the lease before `confirmed_at + lease`; the handler is cancelled at least the margin earlier,
less however late the event loop runs the timer.

The book is kept as a heap ordered by deadline, one entry per lease, and one timer waits for the
earliest (not one timer per job). A renewal moves a lease's deadline later without touching the
heap: when the timer reaches the entry it finds the newer deadline and pushes the lease back.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from emq_worker.observe.clock import Clock
from emq_worker.runtime.lease import Lease, LeaseBook


class LocalDeadlines:
    def __init__(
        self,
        book: LeaseBook,
        clock: Clock,
        lease_s: float,
        margin_s: float,
        expire: Callable[[Lease, float], None],
    ) -> None:
        self._book = book
        self._clock = clock
        self._keep_s = lease_s - margin_s
        self._recheck_s = margin_s
        self._expire = expire
        """Called with a lease past its local deadline and the time (monotonic) it was found."""
        self._heap: list[tuple[float, int, Lease]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None

    def __len__(self) -> int:
        """Entries in the heap (leases watched, and some already gone from the book)."""
        return len(self._heap)

    def deadline(self, lease: Lease) -> float:
        return lease.confirmed_at + self._keep_s

    def watch(self, lease: Lease) -> None:
        """Give `lease` up at its local deadline unless a renewal moves it on meanwhile."""
        at = self.deadline(lease)
        heapq.heappush(self._heap, (at, next(self._order), lease))
        if self._armed_at is None or at < self._armed_at:
            self._arm(at)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._armed_at = None

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, at - self._clock.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)
        self._armed_at = at

    def _fire(self) -> None:
        self._timer = self._armed_at = None
        now = self._clock.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, lease = heapq.heappop(heap)
            if not self._book.holds(lease):
                continue  # settled, lost or released meanwhile
            at = self.deadline(lease)
            if at <= now and (lease.settling or not lease.started):
                # Its outcome's own reply decides it, or no handler runs yet and the pre-start
                # check decides whether one may (a claim answered late): look again later. (A
                # deadline still ahead stays as it is: the handler may start before it.)
                at = now + self._recheck_s
            if at > now:
                heapq.heappush(heap, (at, next(self._order), lease))
                continue
            self._expire(lease, now)
        if heap:
            self._arm(heap[0][0])
