"""The beat's upkeep of one queue: reap expired leases, promote scheduled jobs that fell due
(and sweep the flow outbox promote finds entries in), mint due repeats.

A queue is checked (lua/upkeep.lua: it reaps what has lapsed and reports what else is due) when
the agenda says so (agenda.py), and only what the check finds due runs: a queue where nothing can
be due costs one check per window, and a check another worker made vouches for it to the whole
fleet until something can be due. Each reap and promote loops over bounded script calls
(reap_batch, promote_batch jobs at most), so no single call holds the server for long; the
supervisor decides which queues, and when.
"""

from __future__ import annotations

import logging

from structlog.typing import FilteringBoundLogger

from emq_worker.jobs.repeat import RepeatFirer
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ReapResult
from emq_worker.protocol.upkeep_check import check_upkeep
from emq_worker.runtime.agenda import Agenda
from emq_worker.runtime.outbox import OutboxSweep
from emq_worker.runtime.state import WorkerState


class QueueUpkeep:
    def __init__(
        self,
        state: WorkerState,
        reap_max_attempts: int,
        log: FilteringBoundLogger,
        agenda: Agenda,
        repeats: RepeatFirer,
    ) -> None:
        self.state = state
        self.reap_max_attempts = reap_max_attempts
        self.log = log
        self.agenda = agenda
        self.repeats = repeats
        self._log_jobs = log.is_enabled_for(logging.INFO)
        self.outbox = OutboxSweep(log)
        self.released_parents = 0
        """Flow parents the outbox sweeps released to pending (a burst worker is not idle then)."""

    async def tend(
        self, queue: Queue, budget_ends: float, *, force: bool = False, busy: bool = False
    ) -> None:
        """Whatever the agenda has due on `queue` now: its check, which reaps what lapsed (always
        with `force`; `busy`: this worker holds leases there), more reaps while the check's batch
        was full, and a promote and a repeat scan whose time has come."""
        times = self.agenda[queue.name]
        if force or self.agenda.check_due(queue.name, self.state.clock.monotonic()):
            window_s = self.agenda.window()
            batch, cap = self.state.settings.reap_batch, self.reap_max_attempts
            due = await check_upkeep(queue, int(window_s * 1000), batch, cap, force=force)
            self.agenda.checked(queue.name, due, self.state.clock.monotonic(), window_s, busy)
            returned = self._note_reaped(queue, due.reaped)
            if due.reap_in == 0 and self.state.clock.monotonic() < budget_ends:
                returned += await self.reap(queue, budget_ends)
            self.agenda.reaped(queue.name, returned, due.reap_in == 0, self.state.clock.monotonic())
        if times.promote_at is not None and self.state.clock.monotonic() >= times.promote_at:
            await self.promote(queue)
        if times.repeat_at is not None and self.state.clock.monotonic() >= times.repeat_at:
            await self.fire_repeats(queue)

    async def reap(self, queue: Queue, budget_ends: float) -> int:
        """Reap in batches until caught up or until `budget_ends` (monotonic) has passed; returns
        how many jobs went back to pending."""
        more, returned = True, 0
        while more:
            result = await queue.reap(self.state.settings.reap_batch, self.reap_max_attempts)
            returned += self._note_reaped(queue, result)
            more = result.more and self.state.clock.monotonic() < budget_ends
        return returned

    def _note_reaped(self, queue: Queue, result: ReapResult) -> int:
        """Count and log what a reap (or a check's) did; returns how many went back to pending."""
        self.state.counters.reaped += result.returned
        self.state.counters.reaped_dead += result.dead
        if result.returned or result.dead:
            self.state.counters.by_queue[(queue.name, "reaped")] += result.returned + result.dead
        self.state.counters.phantoms += result.phantoms
        if self._log_jobs:
            for job_id, outcome in result.jobs:
                self.log.info("job_reaped", queue=queue.name, job_id=job_id, to=outcome)
        if result.returned or result.dead or result.phantoms:
            self.log.info(
                "beat_reaped",
                queue=queue.name,
                returned=result.returned,
                dead=result.dead,
                phantoms=result.phantoms,
            )
        return result.returned

    async def promote(self, queue: Queue) -> None:
        """Promote every scheduled job now due; the agenda learns when the next one is."""
        promoted = 0
        while True:
            result = await queue.promote(self.state.settings.promote_batch)
            promoted += result.promoted
            self.state.counters.promoted += result.promoted
            self.state.counters.phantoms += result.phantoms
            if not result.more:
                if result.outbox:
                    self.released_parents += await self.outbox.sweep(queue)
                now = self.state.clock.monotonic()
                self.agenda.promoted(queue.name, promoted, result.next_due_ms, now)
                return

    async def fire_repeats(self, queue: Queue) -> None:
        """Mint the due occurrences of every repeatable job; the agenda learns the next one."""
        due_in = await self.repeats.fire(queue)
        self.agenda.repeats_fired(queue.name, due_in, self.state.clock.monotonic())
