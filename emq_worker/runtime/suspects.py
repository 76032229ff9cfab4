"""The suspects this worker holds: jobs a claim listed as suspects (their holders died or froze
running them twice, or before their last attempt), from their lease until their outcome is
written. Not only until their handler returns: a suspect claimed next, while the first one's
completion waits in the settle batch, may be the poison that kills this process, and the first
one, whose completion dies with it, is reaped a third time and dead-lettered.

While it holds one, the worker claims with no suspect room, so two suspects share a process only
once one has waited half a lease for a worker free of them (lua/claim.lua). Ordinary jobs still
run beside a suspect: nothing waits for the worker to empty.
"""

from __future__ import annotations

from emq_worker.runtime.lease import Lease, LeaseBook


class HeldSuspects:
    def __init__(self, book: LeaseBook) -> None:
        self.book = book
        self._leases: list[Lease] = []

    def add(self, lease: Lease) -> None:
        self._leases.append(lease)

    def room(self) -> int:
        """How many suspects the next claim may lease: 1 when none is held, else 0."""
        self._leases = [lease for lease in self._leases if self.book.holds(lease)]
        return 0 if self._leases else 1
