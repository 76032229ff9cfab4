"""The supervisor owns the beat: reap first, then promote, then drain, then park.

Reap and promote run once per beat (upkeep.py). Drain claims as many ready jobs as there are free
slots (drain.py). Park sleeps until the next beat or the next scheduled job is due; it returns
early on a wake token (new work) or a job handed to this worker's offer (offers.py) when slots are
free, or when a running job frees a slot while all are taken.

A failure that belongs to one queue (a wrong-typed key; on a cluster, the node owning the queue's
slot down) rests that queue alone on its own backoff while the beat goes on with the others
(isolation.py); anything else (a lost connection to a single server, a server-wide refusal such
as OOM) backs off the whole beat, as every queue would fail alike.
"""

from __future__ import annotations

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.beat.drain import Drainer
from emq_worker.beat.history import HistoryRecorder
from emq_worker.beat.isolation import QueueIsolation
from emq_worker.beat.jobgroup import JobGroup
from emq_worker.beat.offers import Offers, offer_ms
from emq_worker.beat.presence import Presence, WorkerRegistry
from emq_worker.beat.queue_health import backoff_s
from emq_worker.beat.runner import JobRunner
from emq_worker.beat.state import WorkerState
from emq_worker.beat.upkeep import QueueUpkeep
from emq_worker.beat.wakes import WakeWaiter
from emq_worker.jobs.repeat import RepeatFirer
from emq_worker.observe.log import get_logger
from emq_worker.observe.sdnotify import Notifier
from emq_worker.observe.status import BeatStatus
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.server.failures import RETRYABLE, describe, fatal, queue_scoped

WITHDRAW_TIMEOUT_S = 5.0


class Supervisor:
    def __init__(
        self,
        state: WorkerState,
        client: Redis,
        runner: JobRunner,
        reap_max_attempts: int,
        notifier: Notifier | None = None,
        registry: WorkerRegistry | None = None,
    ) -> None:
        settings = state.settings
        queues = list(state.queues.values())
        self.registry = registry
        self.client = client
        self.queues = queues
        self.runner = runner
        self.book = state.book
        self.slots = state.slots
        self.settings = settings
        self.counters = state.counters
        self.clock = state.clock
        self.rng = state.rng
        self.stop = state.stop
        self.log = get_logger()
        self.notifier = notifier or Notifier()
        self._park_scope: anyio.CancelScope | None = None
        self._next_beat = 0.0
        self._next_due: float | None = None
        self._next_repeat: float | None = None
        self.repeats = RepeatFirer(SnowflakeMinter(settings.node_id))
        self._woken = False
        self.status = BeatStatus(
            self.notifier, [queue.name for queue in queues], settings.concurrency, self.log
        )
        self._wakes = WakeWaiter(client)
        self.upkeep = QueueUpkeep(state, reap_max_attempts, self.log)
        self.isolation = QueueIsolation(client, queues, state.clock, state.rng, self.log)
        spans_slots = self._wakes.spans_slots([queue.keys.wake for queue in queues])
        self.offers = Offers(queues, offer_ms(settings, spans_slots))
        self.drainer = Drainer(state, runner, self.isolation, self.status, self.offers)
        self.history = HistoryRecorder(
            state.counters, registry.id if registry else "", settings.history_every_ms
        )
        self._name_queues = True
        self.stop.on_request(self._end_park)

    def _end_park(self) -> None:
        """A stop was requested: stop claiming, and end the current park at once."""
        if self._park_scope is not None:
            self._park_scope.cancel()

    async def run(self, jobs: JobGroup) -> None:
        """Beat until a stop is requested (or, in burst mode, until nothing is left)."""
        failures = 0
        while not self.stop.requested:
            # Every pass yields at least once, whatever path it takes, so the renewal sweep and
            # the jobs are never starved by a pass that finds nothing to await.
            await anyio.lowlevel.checkpoint()
            self.notifier.watchdog()
            try:
                idle = await self._cycle(jobs)
                failures = 0
            except RETRYABLE as exc:
                # A dropped connection, or a server-wide refusal that lifts (OOM, READONLY,
                # MISCONF): back off, never spin. One queue's own failure (a WRONGTYPE key) was
                # caught by self.isolation and rests that queue alone. Bad credentials or ACLs
                # stop the worker.
                if fatal(exc):
                    raise
                failures += 1
                pause = backoff_s(failures, self.rng)
                self.log.warning("beat_failed", error=describe(exc), retry_in_ms=int(pause * 1000))
                await self._sleep_unless_stopped(pause)
                continue
            if idle and self.settings.burst:
                self.log.info("burst_done")
                return
        await self._withdraw_offers()

    async def _withdraw_offers(self) -> None:
        """Stopping: no job may be handed to this worker any more; those already handed to it
        and not yet taken go back to pending (shielded, bounded: else the reaper returns them)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(WITHDRAW_TIMEOUT_S):
            try:
                released = await self.offers.withdraw(self.settings.lease_ms)
            except RETRYABLE as exc:
                self.log.warning("withdraw_failed", error=describe(exc))
                return
            self.counters.released += released

    async def _cycle(self, jobs: JobGroup) -> bool:
        """One pass: the beat's reap and promote when due, a drain, and a park.
        Returns True when nothing is held, pending or scheduled."""
        now = self.clock.monotonic()
        if now >= self._next_beat:
            self._next_beat = now + self.settings.beat_ms / 1000
            await self.reap()
            await self.promote()
            await self.fire_repeats()
            await self.announce()
            if self.history.due(now):
                await self.record_history(now)
            self.status.report(now, len(self.book), self.counters.completed)
        elif self._next_due is not None and now >= self._next_due:
            await self.promote()  # a scheduled job fell due between beats
        if self._next_repeat is not None and now >= self._next_repeat:
            await self.fire_repeats()  # a repeat fell due between beats
        drained = await self.drainer.drain(jobs)
        if self._woken and drained.claimed == 0:
            # Woken with nothing to claim: the wake announced a scheduled job (or a retry
            # scheduled by a worker), or a repeat registered or resumed; promote and the repeat
            # firer learn their due times so the park ends on time.
            await self.promote()
            await self.fire_repeats()
        self._woken = False
        idle = drained.claimed == 0 and len(self.book) == 0 and self._next_due is None
        idle = idle and self.drainer.limited_until is None  # held back by a limit is not idle
        idle = idle and not self.isolation.health.resting()  # nor is a queue that failed
        if idle and self.settings.burst:
            released = self.upkeep.released_parents
            await self.promote()  # a job failed since the beat may have been scheduled
            # (and a flow outbox swept: a parent it released is work too)
            idle = self._next_due is None and self.upkeep.released_parents == released
        if not drained.more and not (idle and self.settings.burst):
            await self.park(jobs)
        return idle

    async def reap(self) -> None:
        """Reap in short bounded batches until caught up, or until half a beat has gone: a backlog
        of expired leases (a crashed worker held thousands) comes back within a beat or two,
        while no single call holds the server for long."""
        budget_ends = self.clock.monotonic() + self.settings.beat_ms / 2000
        for queue in self.isolation.ready():
            with self.isolation.isolated(queue):
                await self.upkeep.reap(queue, budget_ends)

    async def announce(self) -> None:
        """Refresh this worker's presence on the queues not resting. A node lost since they
        were picked fails the call (its queues' own calls will rest them); presence lives for
        several beats, so the worker skips this one rather than back off as a whole."""
        if self.registry is None:
            return
        serving = {queue.name for queue in self.isolation.ready()}
        book = self.book
        presence = Presence(
            len(book),
            self.counters.completed,
            book.running,
            dict(book.queues()),
            self.clock.monotonic(),
        )
        try:
            await self.registry.beat(presence, serving)
        except RedisError as exc:
            if fatal(exc) or not queue_scoped(exc):
                raise
            self.log.warning("presence_failed", error=describe(exc))

    async def record_history(self, now: float) -> None:
        """Flush the history (beat/history.py). It only informs operators: a failure is
        logged and the beat goes on (the next flush sends the difference)."""
        ready = self.isolation.ready()
        try:
            await self.history.flush(ready, now)
        except RedisError as exc:
            self.log.warning("history_failed", error=describe(exc))
            return
        if not self._name_queues:
            return
        try:
            await self.history.name_queues(ready)
        except RedisError as exc:
            if fatal(exc):  # an ACL without {emq}:queues: the dashboard SCANs for this queue
                self._name_queues = False
            self.log.warning("queues_not_named", error=describe(exc), retry=self._name_queues)

    async def promote(self) -> None:
        soonest: int | None = None
        for queue in self.isolation.ready():
            with self.isolation.isolated(queue):
                due = await self.upkeep.promote(queue)
                if due is not None:
                    soonest = due if soonest is None else min(soonest, due)
        self._next_due = None if soonest is None else self.clock.monotonic() + soonest / 1000

    async def fire_repeats(self) -> None:
        """Mint the due occurrences of every repeatable job; learn when the next one is due."""
        soonest: int | None = None
        for queue in self.isolation.ready():
            with self.isolation.isolated(queue):
                due_in = await self.repeats.fire(queue)
                if due_in is not None:
                    soonest = due_in if soonest is None else min(soonest, due_in)
        self._next_repeat = None if soonest is None else self.clock.monotonic() + soonest / 1000

    async def park(self, jobs: JobGroup) -> None:
        """Sleep until the next beat, due job or repeat, or the end of a limit's hold; a wake
        token, a job handed to this worker, or a freed slot ends it early."""
        now = self.clock.monotonic()
        times = (
            self._next_due,
            self._next_repeat,
            self.drainer.limited_until,
            self.isolation.next_retry(),
        )
        until = min([self._next_beat, *(t for t in times if t is not None)])
        timeout = until - now
        if timeout <= 0 or self.stop.requested:
            return
        with anyio.CancelScope() as scope:
            self._park_scope = scope
            try:
                if self.book.running >= self.settings.concurrency:
                    with anyio.move_on_after(timeout):
                        await self.slots.arm().wait()
                else:
                    popped = await self.isolation.park(self._wakes, timeout, self.offers)
                    handed = None if popped is None else self.offers.received(*popped)
                    if handed is not None:
                        self.drainer.start_handed_off(jobs, handed)
                    # A wake token may announce a scheduled job (see _cycle); a hand-off never.
                    self._woken = popped is not None and handed is None
            finally:
                self._park_scope = None

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with anyio.CancelScope() as scope:
            self._park_scope = scope
            try:
                await anyio.sleep(seconds)
            finally:
                self._park_scope = None
