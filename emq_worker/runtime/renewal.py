"""The renewal sweep: every tick, one `renew` script call per queue renews every held lease.

The cost of keeping K leases alive is one round trip per queue per send, whatever K is. A lease
the server reports lost cancels its job at once. A renewal that does not answer is left to
finish on its own line (renewal_lines.py) while the queue's renewal is re-sent on another every
quarter interval, so a short silent cut costs no lease. If no renewal is confirmed for a lease
less the stop margin, a timer gives the lease up (deadlines.py), before the server may reap it.
"""

from __future__ import annotations

import anyio
import anyio.abc
from prometheus_client import CollectorRegistry, Histogram

from emq_worker.jobs import tracing
from emq_worker.observe.log import get_logger
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import LostLease
from emq_worker.runtime.deadlines import LocalDeadlines
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.renewal_lines import RenewalLines
from emq_worker.runtime.state import WorkerState
from emq_worker.valkey.failures import RETRYABLE, describe, fatal

CANCEL = "cancel"
"""What renew reports for a held lease whose job an operator asked to cancel."""


RESEND_SHARE = 4
"""While a queue holds a lease unconfirmed for over one interval, its renewal is re-sent every
interval / RESEND_SHARE on another line (renew is idempotent)."""


class RenewalSweep:
    def __init__(self, state: WorkerState, lines: RenewalLines | None = None) -> None:
        self.state = state
        self.lines = lines
        """Where renewals are sent; None: on each queue's own client (an injected client)."""
        self.log = get_logger()
        self.deadlines = LocalDeadlines(
            state.book,
            state.clock,
            self.state.settings.lease_ms / 1000,
            self.state.settings.stop_margin / 1000,
            self._self_fence,
        )
        self._last_sent: dict[str, float] = {}
        if self.state.settings.renew:
            self.state.book.on_add = self.deadlines.watch

    async def run(self) -> None:
        interval = self.state.settings.renew_interval_ms / 1000
        step = interval / RESEND_SHARE
        for lease in self.state.book:  # (claimed before the sweep started)
            self.deadlines.watch(lease)
        next_tick = self.state.clock.monotonic() + interval
        try:
            async with anyio.create_task_group() as sends:
                while True:
                    now = self.state.clock.monotonic()
                    await anyio.sleep(max(0.0, min(next_tick, now + step) - now))
                    now = self.state.clock.monotonic()
                    if now >= next_tick:
                        next_tick = max(next_tick + interval, now)
                        sends.start_soon(self.tick)
                    else:
                        self._resend_unconfirmed(sends, now, step)
        finally:
            self.deadlines.close()

    async def tick(self) -> None:
        """Renew every held lease, one call per queue, all at once; return when each answered
        or failed. A call that does not answer holds up nothing else: the next tick, the
        re-sends and the local deadlines' timer go on without it."""
        sent_at = self.state.clock.monotonic()
        async with anyio.create_task_group() as group:
            for queue, leases in self.state.book.queues():
                group.start_soon(self._renew_queue, queue, leases, sent_at)

    def _resend_unconfirmed(self, sends: anyio.abc.TaskGroup, now: float, step: float) -> None:
        """Re-send a queue's renewal when it holds a lease unconfirmed for over an interval
        (its last renewal is stuck or failed) and nothing was sent for it this step."""
        interval = self.state.settings.renew_interval_ms / 1000
        for queue, leases in self.state.book.queues():
            oldest = min(lease.confirmed_at for lease in leases)
            sent = self._last_sent.get(queue, oldest)
            if now - oldest > interval and now - sent >= step * 0.9:
                sends.start_soon(self._renew_queue, queue, leases, now)

    async def _renew_queue(self, name: str, leases: list[Lease], sent_at: float) -> None:
        if self.lines is None:
            self._last_sent[name] = sent_at
            await self._renew_on(self.state.queues[name], leases, sent_at)
            return
        with self.lines.idle() as line:
            if line is None:  # every line has a renewal in flight: the next step tries again
                return
            self._last_sent[name] = sent_at
            await self._renew_on(line.queue(name), leases, sent_at)

    async def _renew_on(self, queue: Queue, leases: list[Lease], sent_at: float) -> None:
        try:
            lost = await queue.renew([lease.held for lease in leases], self.state.settings.lease_ms)
        except RETRYABLE as exc:  # e.g. OOM refuses renewals: the self-fence covers a long one
            if fatal(exc):
                raise
            self.state.counters.renew_failures += 1
            self.log.warning(
                "renew_failed", queue=queue.name, leases=len(leases), error=describe(exc)
            )
            return
        self.state.counters.renew_sweeps += 1
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
        if lease.cancel_requested or lease.settling or not self.state.book.holds(lease):
            return
        job = lease.job
        self.log.warning("job_cancel_requested", queue=job.queue, job_id=job.id, attempts=job.token)
        lease.cancel()

    def _lose(self, lease: Lease, item: LostLease) -> None:
        if lease.settling or not self.state.book.holds(lease):
            return  # settled meanwhile: the settle's reply tells what happened
        job = lease.job
        stale = _another_holder(item.current, job.token)
        self.state.counters.leases_lost += 1
        if stale:
            self.state.counters.fenced += 1
            self.state.counters.by_queue[(job.queue, "fenced")] += 1
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
        self.state.give_up(lease)

    def _self_fence(self, lease: Lease, now: float) -> None:
        """Give up a lease past its local deadline: no renewal was confirmed for the lease
        less the stop margin, so the server may reap it soon (deadlines.py)."""
        self.state.counters.self_fenced += 1
        job = lease.job
        self.log.warning(
            "lease_self_fenced",
            queue=job.queue,
            job_id=job.id,
            token=job.token,
            unconfirmed_ms=int((now - lease.confirmed_at) * 1000),
            stop_margin_ms=self.state.settings.stop_margin,
        )
        tracing.lease_lost(lease.span, job.id, job.token, "", "unconfirmed")
        self.state.give_up(lease)


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
        held = len(self.state.book)
        started = self.state.clock.monotonic()
        await super().tick()
        if held:
            self.seconds.observe(self.state.clock.monotonic() - started)
            self.leases.observe(held)
