"""The renewal sweep: every tick, one `renew` script call per queue renews every held lease.

The cost of keeping K leases alive is one round trip per queue per tick, whatever K is. A lease
the server reports lost cancels its job at once. If renewals keep failing (Redis unreachable)
for a whole lease, the worker gives its leases up itself: the server has already given them away.
"""

from __future__ import annotations

import anyio
from prometheus_client import CollectorRegistry, Histogram

from emq_worker.beat.lease import Lease
from emq_worker.beat.state import WorkerState
from emq_worker.jobs import tracing
from emq_worker.observe.log import get_logger
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import LostLease
from emq_worker.server.failures import RETRYABLE, describe, fatal

CANCEL = "cancel"
"""What renew reports for a held lease whose job an operator asked to cancel."""


class RenewalSweep:
    def __init__(self, state: WorkerState) -> None:
        self.queues = state.queues
        self.book = state.book
        self.slots = state.slots
        self.settings = state.settings
        self.counters = state.counters
        self.clock = state.clock
        self.log = get_logger()

    async def run(self) -> None:
        interval = self.settings.renew_interval_ms / 1000
        next_tick = self.clock.monotonic() + interval
        while True:
            await anyio.sleep(max(0.0, next_tick - self.clock.monotonic()))
            next_tick = max(next_tick + interval, self.clock.monotonic())
            await self.tick()

    async def tick(self) -> None:
        sent_at = self.clock.monotonic()
        # A renew that never answers (a partition that holds packets, a frozen server) must not
        # hold up the self-fence: the calls get one renewal interval, then leases are judged by
        # what was confirmed. Without this bound the sweep waits for the socket timeout, and
        # jobs run on after another worker has taken them over.
        with anyio.move_on_after(self.settings.renew_interval_ms / 1000) as bound:
            async with anyio.create_task_group() as group:
                for queue, leases in self.book.queues():
                    group.start_soon(self._renew_queue, self.queues[queue], leases, sent_at)
        if bound.cancelled_caught:
            self.counters.renew_failures += 1
            self.log.warning("renew_timed_out", after_ms=self.settings.renew_interval_ms)
        self._self_fence()

    async def _renew_queue(self, queue: Queue, leases: list[Lease], sent_at: float) -> None:
        try:
            lost = await queue.renew([lease.held for lease in leases], self.settings.lease_ms)
        except RETRYABLE as exc:  # e.g. OOM refuses renewals: the self-fence covers a long one
            if fatal(exc):
                raise
            self.counters.renew_failures += 1
            self.log.warning(
                "renew_failed", queue=queue.name, leases=len(leases), error=describe(exc)
            )
            return
        self.counters.renew_sweeps += 1
        lost_by_id = {item.id: item for item in lost}
        for lease in leases:
            item = lost_by_id.get(lease.job.id)
            if item is None or item.current == CANCEL:
                lease.confirmed_at = max(lease.confirmed_at, sent_at)
            if item is None:
                continue
            if item.current == CANCEL:
                self._cancel(lease)
            else:
                self._lose(lease, item)

    def _cancel(self, lease: Lease) -> None:
        if lease.cancel_requested or lease.settling or not self.book.holds(lease):
            return
        job = lease.job
        self.log.warning("job_cancel_requested", queue=job.queue, job_id=job.id, attempts=job.token)
        lease.cancel()

    def _lose(self, lease: Lease, item: LostLease) -> None:
        if lease.settling or not self.book.holds(lease):
            return  # settled meanwhile: the settle's reply tells what happened
        job = lease.job
        stale = _another_holder(item.current, job.token)
        self.counters.leases_lost += 1
        if stale:
            self.counters.fenced += 1
            self.counters.by_queue[(job.queue, "fenced")] += 1
        self.log.warning(
            "lease_lost",
            queue=job.queue,
            job_id=job.id,
            stale_token=job.token,
            current=item.current or "gone",
            fenced=stale,
        )
        if stale:
            tracing.fenced(lease.span, job.id, job.token, "renew", item.current)
        tracing.lease_lost(lease.span, job.id, job.token, item.current, "renew")
        self._give_up(lease)

    def _self_fence(self) -> None:
        """Give up leases no sweep has confirmed for a whole lease (by our own clock)."""
        horizon = self.clock.monotonic() - self.settings.lease_ms / 1000
        for lease in self.book:
            if lease.confirmed_at <= horizon and not lease.settling:
                self.counters.self_fenced += 1
                self.log.warning(
                    "lease_self_fenced",
                    queue=lease.job.queue,
                    job_id=lease.job.id,
                    token=lease.job.token,
                    unconfirmed_ms=self.settings.lease_ms,
                )
                job = lease.job
                tracing.lease_lost(lease.span, job.id, job.token, "", "unconfirmed")
                self._give_up(lease)

    def _give_up(self, lease: Lease) -> None:
        lease.lose()
        self.book.discard(lease)
        self.slots.fire()


def _another_holder(current: str, token: int) -> bool:
    """True when `current` is another claim's attempts, or another claim's lock value
    ("<attempts>:<nonce>"); False when the row is gone or merely no longer active."""
    attempts = current.partition(":")[0]
    return attempts.isdigit() and (attempts != str(token) or ":" in current)


SWEEP_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SWEEP_LEASES_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class MeteredSweep(RenewalSweep):
    """The renewal sweep, timing each tick and counting the leases it renewed."""

    seconds: Histogram
    leases: Histogram

    def meter(self, registry: CollectorRegistry) -> MeteredSweep:
        self.seconds = Histogram(
            "emq_renew_sweep_seconds",
            "Time one renewal sweep took (all queues).",
            buckets=SWEEP_SECONDS_BUCKETS,
            registry=registry,
        )
        self.leases = Histogram(
            "emq_renew_sweep_leases",
            "Leases held when a renewal sweep ran.",
            buckets=SWEEP_LEASES_BUCKETS,
            registry=registry,
        )
        return self

    async def tick(self) -> None:
        held = len(self.book)
        started = self.clock.monotonic()
        await super().tick()
        if held:
            self.seconds.observe(self.clock.monotonic() - started)
            self.leases.observe(held)
