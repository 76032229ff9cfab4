"""The beat's drain: claim as many ready jobs as there are free slots and start each as a task.

The queues the agenda wants claimed (agenda.py: woken, found pending, last claim full, an offer
to renew) are served in the order given, in script calls of at most CLAIM_BATCH jobs (and at most
half the concurrency while handlers await I/O: pace.py); a queue is
left when a call returns fewer than it asked for (it ran dry: the agenda stops wanting it) or says
`limited`, and the whole drain is bounded by one beat. A standing hand-off offer (offers.py) counts
as a slot taken, and the claim that empties a queue leaves a new one; a job handed to an offer is
started here too.

While handlers are short against a claim (pace.py), the drain also claims the next jobs before a
slot frees: they wait, leased, for the first slot (ahead.py), so a claim is in flight while the
current jobs run; a job that waited a beat for a slot goes back to pending unstarted (handlers
run long now), as do all of them when the worker stops.

A claim lists the suspects it leased (jobs whose holders died or froze running them): they run
at once like any job, and while one runs here the worker claims with no suspect room, so suspects
are kept apart (suspects.py) while nothing waits for the worker to empty.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.observe.log import get_logger
from emq_worker.observe.status import BeatStatus
from emq_worker.protocol.limits import CEILING_POLL_MS
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimResult, Limited
from emq_worker.protocol.values import new_nonce
from emq_worker.runtime.agenda import Agenda
from emq_worker.runtime.ahead import ClaimedAhead
from emq_worker.runtime.isolation import QueueIsolation
from emq_worker.runtime.jobgroup import JobGroup
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.offers import HandedOff, Offers
from emq_worker.runtime.runner import JobRunner
from emq_worker.runtime.state import WorkerState
from emq_worker.runtime.suspects import HeldSuspects
from emq_worker.valkey.failures import RETRYABLE, describe, fatal

CLAIM_BATCH = 250
"""The most jobs one claim call leases: bounds how long the call holds the server."""


@dataclass(slots=True)
class DrainResult:
    claimed: int = 0
    more: bool = False
    """The drain stopped at its time bound with slots free and work maybe left."""


@dataclass(frozen=True, slots=True)
class BeatGuides:
    """The parts of the beat that say where and when to claim, shared by the drain and the
    supervisor: the agenda, the queues' isolation, the hand-off offers, the beat's status."""

    agenda: Agenda
    isolation: QueueIsolation
    offers: Offers
    status: BeatStatus


class Drainer:
    def __init__(self, state: WorkerState, runner: JobRunner, guides: BeatGuides) -> None:
        self.state = state
        self.runner = runner
        self.isolation = guides.isolation
        self.status = guides.status
        self.offers = guides.offers
        self.agenda = guides.agenda
        self.log = get_logger()
        self._log_jobs = self.log.is_enabled_for(logging.INFO)
        """One event per job transition at info; nothing per job above it (throughput)."""
        self.suspects = HeldSuspects(state.book)
        self._memo_ms = state.settings.claim_memo_ms
        self.ahead = ClaimedAhead(state.book)
        """Jobs claimed before a slot was free for them, waiting for one."""

    async def keep_offers(self) -> None:
        """Renew each standing offer due for it (lua/offer.lua: five commands, not a claim); an
        offer that no longer stands has its queue claimed in this drain instead."""
        for queue in self.isolation.ready():
            sent_at = self.state.clock.monotonic()
            if not self.agenda.offer_due(queue.name, sent_at):
                continue
            standing = False
            with self.isolation.isolated(queue):
                lease_ms, offer_ms = self.state.settings.lease_ms, self.offers.offer_ms
                standing = await queue.keep_offer(self.offers.nonce(queue.name), lease_ms, offer_ms)
            self.offers.kept(queue.name, sent_at, standing)
            self.agenda.offer_kept(
                queue.name, self.offers.renew_at(queue.name) if standing else None
            )

    async def drain(self, jobs: JobGroup) -> DrainResult:
        await self.keep_offers()
        drained = DrainResult()
        now = self.state.clock.monotonic()
        await self.hand_back(waiting_since=now - self.state.settings.beat_ms / 1000)
        self.start_waiting(jobs)
        deadline = now + self.state.settings.beat_ms / 1000
        for queue in self.isolation.ready():
            if not self.agenda.wants_claim(queue.name, self.state.clock.monotonic()):
                continue
            while not self.state.stop.requested:
                if self.state.clock.monotonic() >= deadline:
                    drained.more = True
                    return drained
                claimed_at = self.state.clock.monotonic()
                count, ahead = self._wanted(queue.name, claimed_at)
                if count <= 0:
                    break  # every slot runs (or a later queue's standing offer holds one)
                result = await self._claim_or_rest(queue, count, claimed_at, ahead)
                if result is None:
                    break
                self.state.pace.claimed(self.state.clock.monotonic() - claimed_at)
                self.status.note_pause(queue.name, result.paused)
                self.state.counters.phantoms += result.phantoms
                self.start(jobs, result, claimed_at)
                drained.claimed += len(result.jobs)
                dry = len(result.jobs) + result.phantoms < count
                renew_at = self.offers.renew_at(queue.name)
                self.agenda.claimed(queue.name, len(result.jobs), dry, renew_at)
                if result.limited is not None:
                    self._hold_back(queue.name, result.limited)
                    break
                if dry:
                    break
        return drained

    def _batch(self) -> int:
        """The most jobs one claim asks for: half the slots while handlers await I/O, so that
        one half's claim is in flight while the other half's jobs run (pace.py)."""
        if self.state.pace.split_claims():
            return min(CLAIM_BATCH, max(1, self.state.settings.concurrency // 2))
        return CLAIM_BATCH

    def _wanted(self, queue: str, now: float) -> tuple[int, int]:
        """How many jobs the next claim on `queue` asks for (0 or less: none now), and how many
        of those are for no free slot: the free slots; and while handlers are short (pace.py),
        as many again as the slots (at most a claim batch) ahead of a free slot, refilled once
        half of them have started."""
        concurrency = self.state.settings.concurrency
        waiting = len(self.ahead)
        started = self.state.book.running - waiting
        free = concurrency - started - self.offers.reserved(other_than=queue)
        if not self.state.pace.claims_ahead(now):
            return min(free, self._batch()), 0
        short = min(CLAIM_BATCH, concurrency) - waiting
        if free <= 0 and short * 2 < min(CLAIM_BATCH, concurrency):
            return 0, 0
        count = min(max(free, 0) + short, self._batch())
        return count, count - min(max(free, 0), count)

    def start_waiting(self, jobs: JobGroup) -> None:
        """Start the jobs claimed ahead, oldest first, in the slots free now (a standing offer
        keeps one for the job it may be handed)."""
        waiting = len(self.ahead)
        if not waiting:
            return
        started = self.state.book.running - waiting
        free = self.state.settings.concurrency - started - self.offers.reserved(other_than="")
        for lease in self.ahead.take(free):
            jobs.start(self.runner.run, lease)

    async def hand_back(self, waiting_since: float | None = None) -> None:
        """Hand the jobs waiting for a slot back to pending, unstarted: all of them (the worker
        stops), or those waiting since before `waiting_since` (a beat without a slot for them:
        handlers run long now, and another worker may start them at once). Best effort, on the
        queues not resting: a job not handed back waits on for a slot (its lease renewed), or
        is released with the rest when the worker stops; a failure never holds up the beat."""
        ready = {queue.name for queue in self.isolation.ready()}
        for name, leases in self.ahead.by_queue(waiting_since).items():
            if name not in ready:
                continue
            try:
                released = await self.state.queues[name].release([lease.held for lease in leases])
            except RETRYABLE as exc:
                if fatal(exc):
                    raise
                self.log.warning("hand_back_failed", queue=name, error=describe(exc))
                continue
            self.ahead.forget(leases)
            for lease in leases:
                self.state.book.discard(lease)
            self.state.counters.released += released
            self.log.info("claimed_ahead_handed_back", queue=name, jobs=len(leases))

    def start(
        self, jobs: JobGroup, result: ClaimResult, confirmed_at: float, handed_off: bool = False
    ) -> None:
        """Start every job of a claim (each leased as of `confirmed_at`) as its own task, in the
        slots free now; the others wait for one (after those claimed earlier)."""
        for job in result.jobs:
            lease = Lease(job=job, confirmed_at=confirmed_at)
            self.state.book.add(lease)
            suspect = job.id in result.suspects
            if suspect:
                self.suspects.add(lease)
            self.ahead.add(lease, confirmed_at, first=handed_off)
            if self._log_jobs:
                self.log.info(
                    "job_claimed",
                    queue=job.queue,
                    job_id=job.id,
                    attempts=job.token,
                    **({"suspect": True} if suspect else {}),
                    **({"handed_off": True} if handed_off else {}),
                )
        self.start_waiting(jobs)
        if result.jobs:
            self.state.counters.claimed += len(result.jobs)
            self.state.counters.by_queue[(result.jobs[0].queue, "claimed")] += len(result.jobs)

    def start_handed_off(self, jobs: JobGroup, handed: HandedOff) -> None:
        """Start a job enqueue.lua leased to this worker's offer (its lease began after the claim
        that left the offer was sent)."""
        self.state.counters.handed_off += 1
        result = ClaimResult((handed.job,), paused=False, phantoms=0)
        self.start(jobs, result, handed.made_at, handed_off=True)

    async def _claim_or_rest(
        self, queue: Queue, count: int, claimed_at: float, ahead: int
    ) -> ClaimResult | None:
        """Claim; None when the queue failed and now rests. A success ends the queue's streak."""
        with self.isolation.isolated(queue):
            result = await self._claim(queue, count, claimed_at, ahead)
            self.isolation.recovered(queue.name)
            return result
        return None

    async def _claim(self, queue: Queue, count: int, claimed_at: float, ahead: int) -> ClaimResult:
        """Claim; when the connection drops before the reply, claim once more with the same
        nonce: claim.lua's memo hands back what the lost reply leased, rather than leaving those
        jobs stranded until the reaper returns them a lease later. (An offer is left only with a
        free slot to spare for it: not in the `ahead` part of the count.)"""
        nonce = new_nonce()
        terms = self.offers.terms(queue.name, may_offer=not self.state.stop.requested)
        if ahead:
            terms = terms._replace(room=terms.room + ahead)
        result: ClaimResult | None = None
        lease_ms, room = self.state.settings.lease_ms, self.suspects.room()
        woken = self.agenda[queue.name].woken

        async def send() -> ClaimResult:
            memo_ms = self._memo_ms
            return await queue.claim(
                count, lease_ms, nonce, terms, room, clear_wake=woken, memo_ms=memo_ms
            )

        try:
            try:
                result = await send()
            except (RedisConnectionError, RedisTimeoutError):
                result = await send()
        finally:
            self.offers.claimed(queue.name, terms, claimed_at, result)
        return result

    def _hold_back(self, queue: str, limited: Limited) -> None:
        """A limit refused the claim: claim the queue again when its window reopens (rate), or
        poll for a slot freed elsewhere (concurrency), rather than spin or wait for a wake."""
        wait_ms = limited.retry_after_ms if limited.reason == "rate" else CEILING_POLL_MS
        self.agenda.held_back(queue, self.state.clock.monotonic() + max(1, wait_ms) / 1000)
