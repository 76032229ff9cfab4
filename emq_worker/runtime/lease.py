"""Held leases: what the worker owns right now, and the task of the job running under each.

A lease is confirmed as of the send time of the last claim or renewal that covered it and was
answered; if none has been for a lease less the stop margin (by the worker's monotonic clock),
the server may give it away soon and the worker stops that job itself (deadlines.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from emq_worker.protocol.names import JobId
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.values import HeldLease


@dataclass(slots=True, eq=False)
class Lease:
    job: ClaimedJob
    confirmed_at: float
    """Monotonic time at which the last claim or renewal covering this lease that the server
    answered was sent: the lease's local deadline is this plus the lease less the stop margin."""
    task: asyncio.Task[None] | None = None
    """The job's task once it runs: a lost lease cancels exactly this task."""
    started: bool = False
    """Its handler has begun. Before that nothing runs, so the local deadline stops nothing: a
    lease that arrives already past it (a claim answered late) is confirmed by the pre-start
    check instead (prestart.py), and the handler starts only on a confirmed lease."""
    lost: bool = False
    cancel_requested: bool = False
    """An operator asked to cancel this job: it is stopped and settled dead, still fenced."""
    timed_out: bool = False
    """Its job's timeout passed while the handler ran: stopped, and failed (timeouts.py)."""
    settling: bool = False
    """The handler has returned and its outcome is being written; that write's own reply,
    not a concurrent renewal, decides what became of the job."""
    span: Any = None
    """The attempt's OpenTelemetry span (jobs/tracing.py) while tracing is on: the renewal sweep
    and the settle batcher record a lost lease or a fenced write on it; the batcher ends it once
    the outcome is written, the runner when the job is dropped."""
    claimed_at: float = -1.0
    """Monotonic time at which the claim that leased it was sent (its first `confirmed_at`):
    the presence entry tells the dashboard how long ago that was."""

    def __post_init__(self) -> None:
        if self.claimed_at < 0:
            self.claimed_at = self.confirmed_at

    @property
    def held(self) -> HeldLease:
        return HeldLease(self.job.id, self.job.token, self.job.nonce)

    def cancel(self) -> None:
        """Stop the job at once; the runner settles it dead (the lease is still ours)."""
        self.cancel_requested = True
        if self.task is not None:
            self.task.cancel()

    def time_out(self) -> None:
        """Stop the job at once; the runner fails it as timed out (the lease is still ours)."""
        self.timed_out = True
        if self.task is not None:
            self.task.cancel()

    def lose(self) -> None:
        """Stop the job at once; its late result will never be written."""
        self.lost = True
        if self.task is not None:
            self.task.cancel()


class LeaseBook:
    """Every lease the worker holds, by queue and job id; changes in O(1)."""

    def __init__(self) -> None:
        self._by_queue: dict[str, dict[JobId, Lease]] = {}
        self._size = 0
        self._settling = 0
        self._emptied = anyio.Event()
        self._emptied.set()
        self._settled = anyio.Event()
        self._settled.set()
        self.on_add: Callable[[Lease], None] | None = None
        """Told of every lease added (the local deadlines' timer watches it)."""

    def __len__(self) -> int:
        return self._size

    @property
    def running(self) -> int:
        """Leases whose handler still runs (held minus those whose outcome is being written)."""
        return self._size - self._settling

    def mark_settling(self, lease: Lease) -> None:
        if not lease.settling and self.holds(lease):
            lease.settling = True
            self._settling += 1
            if self._settled.is_set():
                self._settled = anyio.Event()

    def add(self, lease: Lease) -> None:
        leases = self._by_queue.setdefault(lease.job.queue, {})
        if lease.job.id not in leases:
            self._size += 1
        leases[lease.job.id] = lease
        if self._emptied.is_set():
            self._emptied = anyio.Event()
        if self.on_add is not None:
            self.on_add(lease)

    def discard(self, lease: Lease) -> None:
        leases = self._by_queue.get(lease.job.queue, {})
        if leases.get(lease.job.id) is lease:
            del leases[lease.job.id]
            self._size -= 1
            if lease.settling:
                self._settling -= 1
                if self._settling == 0:
                    self._settled.set()
            if self._size == 0:
                self._emptied.set()

    def holds_on(self, queue: str) -> bool:
        """Whether any lease is held on `queue`."""
        return bool(self._by_queue.get(queue))

    def holds(self, lease: Lease) -> bool:
        return self._by_queue.get(lease.job.queue, {}).get(lease.job.id) is lease

    def queues(self) -> Iterator[tuple[str, list[Lease]]]:
        """A snapshot per queue that holds anything (safe to mutate the book meanwhile)."""
        for queue, leases in list(self._by_queue.items()):
            if leases:
                yield queue, list(leases.values())

    def __iter__(self) -> Iterator[Lease]:
        for _, leases in self.queues():
            yield from leases

    async def wait_empty(self) -> None:
        await self._emptied.wait()

    async def wait_settled(self) -> None:
        """Until no outcome is waiting to be written."""
        await self._settled.wait()


class SlotSignal:
    """Lets the supervisor sleep until some job frees its slot."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def fire(self) -> None:
        self._event.set()

    def arm(self) -> anyio.Event:
        """The event the next `fire` sets (a fresh one if the last was already fired)."""
        if self._event.is_set():
            self._event = anyio.Event()
        return self._event
