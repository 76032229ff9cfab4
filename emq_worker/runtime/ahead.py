"""Jobs claimed ahead of a free slot: leased and held (renewed, fenced, in the book like any), but
not yet started, because every slot runs a handler.

A claim's reply takes the server's run of the script and a round trip (1-5 ms); a worker whose
handlers end within a few of those (no-ops, a cache call) would otherwise sit idle for each
claim with every slot free: 27-38 % of a no-op drain, measured. Claiming the next jobs while the
current ones run (drain.py, while pace.py says handlers are short) keeps a claim in flight
beside them; a slot that frees takes the job that has waited here longest, and the next claim
refills the wait. Handlers never run more than `concurrency` at once: what waits here has not
started.

A job waiting here is started when a slot frees, or handed back to pending unstarted once it has
waited a beat (the handlers running now are long: another worker may start it at once) or when
the worker stops (drain.py, supervisor.py). Its lease is renewed by the sweep meanwhile, and a
lease lost or cancelled while it waits is dropped or settled by the runner as for any job not
yet started.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from emq_worker.runtime.lease import Lease, LeaseBook


class ClaimedAhead:
    def __init__(self, book: LeaseBook) -> None:
        self._book = book
        self._waiting: deque[tuple[float, Lease]] = deque()
        """(since when, lease), the longest waiting first."""

    def __len__(self) -> int:
        """Leases waiting that are still held (those lost meanwhile are dropped here first)."""
        waiting, book = self._waiting, self._book
        if waiting and not all(book.holds(lease) for _, lease in waiting):
            self._waiting = deque(item for item in waiting if book.holds(item[1]))
        return len(self._waiting)

    def add(self, lease: Lease, since: float, *, first: bool = False) -> None:
        """Wait from `since` (monotonic, no earlier than the last added's); `first`: ahead of
        the others, from earlier still (a job handed to this worker's offer, which kept a slot
        for it, leased from when the offer was made)."""
        if first:
            self._waiting.appendleft((since, lease))
        else:
            self._waiting.append((since, lease))

    def take(self, count: int) -> Iterator[Lease]:
        """Up to `count` leases, the longest waiting first, each still held."""
        waiting, book = self._waiting, self._book
        while count > 0 and waiting:
            _, lease = waiting.popleft()
            if book.holds(lease):
                count -= 1
                yield lease

    def by_queue(self, since_before: float | None = None) -> dict[str, list[Lease]]:
        """The leases waiting (still held) per queue: all, or those waiting since before then."""
        found: dict[str, list[Lease]] = {}
        for since, lease in self._waiting:
            if since_before is not None and since >= since_before:
                break  # (the longest waiting first: the rest came later still)
            if self._book.holds(lease):
                found.setdefault(lease.job.queue, []).append(lease)
        return found

    def forget(self, leases: list[Lease]) -> None:
        """Drop `leases` from the wait (handed back)."""
        gone = set(map(id, leases))
        self._waiting = deque(item for item in self._waiting if id(item[1]) not in gone)
