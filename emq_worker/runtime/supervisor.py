"""The supervisor owns the beat: reap first, then promote, then drain, then park.

Each pass tends the queues whose time has come (upkeep.py: a check of what is due, then the reap,
promote or repeat scan it calls for), drains the queues the agenda wants claimed (drain.py), and
parks. Park sleeps until the next beat (a worker holding nothing: its next chore) or the next
time the agenda (agenda.py) holds; it returns early on a wake token (new work on that queue) or a
job handed to this worker's offer (offers.py) when slots are free, or when a running job frees a
slot while all are taken. An idle worker thus costs one BLPOP over all its wake keys per tick of
the agenda's grid with something due, plus one check per queue per check window, shared by the
fleet: never a reap, promote and claim per queue per beat.

A failure that belongs to one queue (a wrong-typed key; on a cluster, the node owning the queue's
slot down) rests that queue alone on its own backoff while the beat goes on with the others
(isolation.py); anything else (a lost connection to a single server, a server-wide refusal such
as OOM) backs off the whole beat, as every queue would fail alike.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.observe.log import get_logger
from emq_worker.observe.sdnotify import Notifier
from emq_worker.protocol import control
from emq_worker.runtime.drain import BeatGuides, Drainer
from emq_worker.runtime.history_flush import HistoryRecorder
from emq_worker.runtime.jobgroup import JobGroup
from emq_worker.runtime.presence import Presence, WorkerRegistry
from emq_worker.runtime.queue_health import backoff_s
from emq_worker.runtime.queue_upkeep import QueueUpkeep
from emq_worker.runtime.state import WorkerState
from emq_worker.runtime.wakes import Popped, WakeWaiter
from emq_worker.valkey.failures import RETRYABLE, describe, fatal, queue_scoped

WITHDRAW_TIMEOUT_S = 5.0
PRESENCE_SHARE = 3
"""The worker's presence entries are refreshed every third of their TTL, not every beat."""


@dataclass(frozen=True, slots=True)
class BeatParts:
    """What the beat works with, built by assembly.py."""

    client: Redis
    guides: BeatGuides
    """Where and when to claim: the agenda, the queues' isolation, the offers, the status."""
    wakes: WakeWaiter
    upkeep: QueueUpkeep
    drainer: Drainer
    history: HistoryRecorder
    notifier: Notifier
    registry: WorkerRegistry | None


class Supervisor:
    def __init__(self, state: WorkerState, parts: BeatParts) -> None:
        self.state = state
        self.registry = parts.registry
        self._by_name = state.queues
        self.log = get_logger()
        self.notifier = parts.notifier
        self._park_scope: anyio.CancelScope | None = None
        self._next_beat = 0.0
        self._presence_at: float | None = None
        """When the entry was last refreshed (monotonic); None: refresh at once."""
        self._asked_at_park = False
        """A park popped an operator's token: read what was asked on the next pass."""
        guides = parts.guides
        self.status = guides.status
        self.agenda = guides.agenda
        self.isolation = guides.isolation
        self.offers = guides.offers
        self._by_wake = {queue.keys.wake: queue.name for queue in state.queues.values()}
        self._wakes = parts.wakes
        if self.registry is not None and parts.wakes.clustered:
            self.registry.keep_busy_ttl()
        self.upkeep = parts.upkeep
        self.drainer = parts.drainer
        self.history = parts.history
        self._name_queues = True
        self.control = ""
        """What an operator asked of this worker and it honours (protocol/control.py)."""
        self.state.stop.on_request(self._end_park)

    def _end_park(self) -> None:
        """A stop was requested: stop claiming, and end the current park at once."""
        if self._park_scope is not None:
            self._park_scope.cancel()

    async def run(self, jobs: JobGroup) -> None:
        """Beat until a stop is requested (or, in burst mode, until nothing is left)."""
        failures = 0
        while not self.state.stop.requested:
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
                pause = backoff_s(failures, self.state.rng)
                self.log.warning("beat_failed", error=describe(exc), retry_in_ms=int(pause * 1000))
                await self._sleep_unless_stopped(pause)
                continue
            if idle and self.state.settings.burst:
                self.log.info("burst_done")
                return
        await self._withdraw_offers()
        await self._hand_back_waiting()

    async def _withdraw_offers(self) -> None:
        """Stopping: no job may be handed to this worker any more; those already handed to it
        and not yet taken go back to pending (shielded, bounded: else the reaper returns them)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(WITHDRAW_TIMEOUT_S):
            try:
                released = await self.offers.withdraw(self.state.settings.lease_ms)
            except RETRYABLE as exc:
                self.log.warning("withdraw_failed", error=describe(exc))
                return
            self.state.counters.released += released

    async def _hand_back_waiting(self) -> None:
        """Stopping: the jobs claimed ahead of a slot go back to pending unstarted (shielded,
        bounded: else the worker's release returns them once the running jobs are done)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(WITHDRAW_TIMEOUT_S):
            try:
                await self.drainer.hand_back()
            except RETRYABLE as exc:
                self.log.warning("hand_back_failed", error=describe(exc))

    async def _cycle(self, jobs: JobGroup) -> bool:
        """One pass: the beat's own chores when due, the queues' upkeep when due, a drain, and a
        park. Returns True when nothing is held, pending or scheduled."""
        now = self.state.clock.monotonic()
        # An operator's token ended the park: read the request (one GET), so that the entry goes
        # from saying the request to saying it is honoured, never neither.
        asked, self._asked_at_park = self._asked_at_park, False
        if now >= self._next_beat:
            self._next_beat = now + self.state.settings.beat_ms / 1000
            if self.history.due(now):
                await self.record_history(now)
            self.status.report(now, len(self.state.book), self.state.counters.completed)
            if now >= self.presence_due():
                await self.announce()
            elif self.state.book or asked or self.control:  # a quiet worker parks on no key
                await self.hear_operator()
        elif asked:
            await self.hear_operator()
        if self.control:
            self.drainer.start_waiting(jobs)  # held already: they run, as the others do
            return await self.quiet_beat()
        if self.state.settings.burst:
            self.agenda.eager(now)  # a burst worker sees every queue for itself, every pass
        released = self.upkeep.released_parents
        await self.tend()
        drained = await self.drainer.drain(jobs)
        await self.tend_woken_dry()
        idle = drained.claimed == 0 and len(self.state.book) == 0 and not self.agenda.scheduled()
        idle = idle and not self.agenda.holding()  # held back by a limit is not idle
        idle = idle and not self.isolation.health.resting()  # nor is a queue that failed
        if idle and self.state.settings.burst:
            await self.tend(force=True)  # a job failed since the check may have been scheduled
            idle = not self.agenda.scheduled()
        # A flow parent that an outbox sweep released in this pass (by any of its upkeep steps,
        # the woken-dry promote included) is work the drain may not have seen yet.
        idle = idle and self.upkeep.released_parents == released
        if not drained.more and not (idle and self.state.settings.burst):
            await self.park(jobs)
        return idle

    async def hear_operator(self) -> None:
        """A worker holding jobs, or quiet, hears an operator within a beat (one GET of its entry
        per beat); an idle one when the operator's token ends its park (or at its next presence
        refresh, on a cluster)."""
        if self.registry is None:
            return
        asked = await self._skippable(self.registry.asked(), "control_failed")
        if asked is not None:
            await self.heed_operator(asked)

    async def heed_operator(self, asked: str) -> None:
        """Honour what an operator asked of this worker (heard at its presence refresh): `quiet`
        claims nothing new from now on; `stop` also hands back what it holds and ends the run."""
        if asked not in control.ASKS or asked == self.control:
            return
        self.log.info("operator_asked", control=asked, held=len(self.state.book))
        if not self.control:
            await self._withdraw_offers()  # no job may be handed to a quiet worker
        self.control = asked
        # Say so now: a refresh that read the request replaced the entry without it, and an idle
        # worker's next one is seconds away (the dashboard would show neither meanwhile).
        await self.announce()
        if asked == control.STOP:
            self.notifier.stopping("stopping: an operator asked; handing back held jobs")
            self.state.stop.request(hand_back=True)

    async def quiet_beat(self) -> bool:
        """A quiet worker's pass: no upkeep, no claim, no park on the wake keys (a token it
        popped would be lost to the workers that claim); it sleeps until its next beat while
        its jobs finish. True (idle) once it holds nothing."""
        await self._sleep_unless_stopped(self._next_beat - self.state.clock.monotonic())
        return len(self.state.book) == 0

    async def tend(self, *, force: bool = False) -> None:
        """Every queue's upkeep that is due (all of it with `force` or in burst mode). Reaps run
        in short bounded batches until caught up, or until half a beat has gone: a backlog of
        expired leases (a crashed worker held thousands) comes back within a beat or two, while
        no single call holds the server for long."""
        force = force or self.state.settings.burst
        budget_ends = self.state.clock.monotonic() + self.state.settings.beat_ms / 2000
        for queue in self.isolation.ready():
            with self.isolation.isolated(queue):
                busy = self.state.book.holds_on(queue.name)
                await self.upkeep.tend(queue, budget_ends, force=force, busy=busy)

    async def tend_woken_dry(self) -> None:
        """A wake token that found nothing to claim announced a due time (a job scheduled for
        later, a retry, a repeat registered or resumed): promote and scan repeats on its queue
        now, so the park ends on time."""
        for name in self.agenda.woken_dry():
            queue = self._by_name[name]
            if queue in self.isolation.ready():
                with self.isolation.isolated(queue):
                    await self.upkeep.promote(queue)
                    await self.upkeep.fire_repeats(queue)

    async def announce(self) -> None:
        """Refresh this worker's presence (one entry for all its queues). A node lost fails the
        call; presence lives for several beats, so the worker skips this one rather than back
        off as a whole."""
        if self.registry is None:
            return
        self._presence_at = self.state.clock.monotonic()
        book = self.state.book
        presence = Presence(
            len(book),
            self.state.counters.completed,
            book.running - len(self.drainer.ahead),
            dict(book.queues()),
            self.state.clock.monotonic(),
            self.control,
        )
        asked = await self._skippable(self.registry.beat(presence), "presence_failed")
        if asked is not None:
            await self.heed_operator(asked)

    async def _skippable(self, call: Awaitable[str], event: str) -> str | None:
        """The reply of a presence call, or None when a node of its own was lost (logged as
        `event`): presence lives for several beats, so the worker skips this one rather than
        back off as a whole; any other failure is the beat's."""
        try:
            return await call
        except RedisError as exc:
            if fatal(exc) or not queue_scoped(exc):
                raise
            self.log.warning(event, error=describe(exc))
            return None

    def presence_due(self) -> float:
        """When the entry is next refreshed: a third of the TTL it was written with, or of a busy
        worker's TTL once it holds jobs (its entry then changes with every claim); on the
        agenda's grid, as the queues' idle chores, so that one wake-up serves all that fall due."""
        registry = self.registry
        if registry is None:
            return math.inf
        if self._presence_at is None:
            return 0.0
        ttl_ms = min(registry.written_ttl_ms, registry.ttl_for(len(self.state.book)))
        return self.agenda.align(self._presence_at + ttl_ms / 1000 / PRESENCE_SHARE, up=False)

    def presence_waits(self) -> bool:
        """Whether an idle park may run past the refresh's time: the entry was written with a
        TTL long enough that a refresh made when the park ends anyway (at most `idle_park_ms`
        later) still comes a third of it before it lapses."""
        registry = self.registry
        if registry is None:
            return True
        ttl_s = registry.written_ttl_ms / 1000
        return self.state.settings.idle_park_ms / 1000 <= ttl_s / PRESENCE_SHARE

    def _ask_keys(self) -> tuple[str, ...]:
        """The list an operator's request pushes a token onto (presence.py), watched by the park
        on one server; a cluster's worker (its park spans slots) and one whose entries are per
        queue (no `{emq}:` keys in its ACL) hear requests at their refresh instead."""
        registry = self.registry
        if registry is None or registry.per_queue or self._wakes.clustered:
            return ()
        return (registry.ask_key,)

    async def record_history(self, now: float) -> None:
        """Flush the history (runtime/history_flush.py). It only informs operators: a failure is
        logged and the beat goes on (the next flush sends the difference)."""
        ready = self.isolation.ready()
        try:
            await self.history.flush(ready, now)
        except RedisError as exc:
            self.log.warning("history_failed", error=describe(exc))
            return
        if not self._name_queues or not self.history.naming_due(now):
            return
        try:
            await self.history.name_queues(ready)
        except RedisError as exc:
            if fatal(exc):  # an ACL without {emq}:queues: the dashboard SCANs for this queue
                self._name_queues = False
            self.log.warning("queues_not_named", error=describe(exc), retry=self._name_queues)
            return
        self.history.named(now)

    async def park(self, jobs: JobGroup) -> None:
        """Sleep for a beat (longer while holding nothing: `longest_park_s`), or until the
        agenda's next time or the end of a resting queue's pause; a wake token, a job handed to
        this worker, or a freed slot ends it early."""
        now = self.state.clock.monotonic()
        times = (self.agenda.next_time(now), self.isolation.next_retry())
        # From now (not from the beat's start): a park that ends for the agenda starts a fresh
        # one, so an idle worker sends one BLPOP per thing it has to do, not one per beat.
        until = min([now + self.longest_park_s(now), *(t for t in times if t is not None)])
        timeout = until - now
        if timeout <= 0 or self.state.stop.requested:
            return
        with anyio.CancelScope() as scope:
            self._park_scope = scope
            try:
                if self.state.book.running >= self.state.settings.concurrency:
                    with anyio.move_on_after(timeout):
                        await self.state.slots.arm().wait()
                else:
                    also = self._ask_keys()
                    popped = await self.isolation.park(self._wakes, timeout, self.offers, also)
                    self.heard(jobs, popped)
            finally:
                self._park_scope = None

    def longest_park_s(self, now: float) -> float:
        """A beat; for a worker that holds nothing, until its next chore that cannot wait (a
        presence refresh whose entry would lapse, a watchdog ping), at most `idle_park_ms`: a
        wake token, a hand-off or an operator's token ends a park at once, so a longer one
        delays no job, and an idle worker sends a BLPOP every few seconds instead of every beat.
        The history flush and an idle entry's refresh wait for the park's end (a few seconds
        late: they only inform). (Not on a cluster: a park spanning more slots than it watches
        at once claims the others after each park.)"""
        settings = self.state.settings
        beat_s = settings.beat_ms / 1000
        if len(self.state.book) or self._wakes.clustered:
            return beat_s
        chores: list[float] = [now + settings.idle_park_ms / 1000]
        if not self.presence_waits():
            chores.append(self.presence_due())
        ping_every = self.notifier.ping_every_s
        if ping_every is not None:
            chores.append(now + ping_every)
        return max(beat_s, min(chores) - now)

    def heard(self, jobs: JobGroup, popped: Popped | None) -> None:
        """What a park brought: a job handed to this worker starts now (and its queue is claimed
        next, to offer again); a wake token has its queue claimed next. So have the queues whose
        wake keys the park could not watch to the end (a cluster's several BLPOPs)."""
        for key in self._wakes.unwatched:
            if key in self._by_wake:
                self.agenda.woken(self._by_wake[key])
        if popped is None:
            return
        if popped[0] in self._ask_keys():
            self._asked_at_park = True
            return
        handed = self.offers.received(*popped)
        if handed is not None:
            self.drainer.start_handed_off(jobs, handed)
            self.agenda.want(handed.job.queue)
        elif popped[0] in self._by_wake:
            self.agenda.woken(self._by_wake[popped[0]])

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        if seconds <= 0 or self.state.stop.requested:
            return
        with anyio.CancelScope() as scope:
            self._park_scope = scope
            try:
                await anyio.sleep(seconds)
            finally:
                self._park_scope = None
