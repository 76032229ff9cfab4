"""The self-fence timer (runtime/deadlines.py) on the event loop: a lease past its local deadline
is given up only once its handler has started; before that the pre-start check decides."""

from __future__ import annotations

import time

import anyio

from emq_worker.observe.clock import MonotonicClock
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.runtime.deadlines import LocalDeadlines
from emq_worker.runtime.lease import Lease, LeaseBook
from tests.support.wait import until

LEASE_S, MARGIN_S = 1.5, 0.1


async def test_a_lease_past_its_deadline_is_given_up_once_its_handler_started() -> None:
    book = LeaseBook()
    expired: list[Lease] = []
    deadlines = LocalDeadlines(
        book, MonotonicClock(), LEASE_S, MARGIN_S, lambda lease, _: expired.append(lease)
    )
    book.on_add = deadlines.watch
    late = Lease(ClaimedJob("q", JobId("late"), b"", Token(1), "n"), time.monotonic() - 2 * LEASE_S)
    try:
        book.add(late)  # a claim answered two leases after it was sent
        # Three recheck periods: the old timer gave it up at once, this one looks every margin.
        await anyio.sleep(3 * MARGIN_S)
        assert expired == [], "given up before its handler started"
        late.started = True
        await until(lambda: expired == [late], what="the started lease given up", within=1.0)
    finally:
        deadlines.close()
