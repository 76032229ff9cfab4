"""The beat's upkeep of one queue: reap expired leases, promote scheduled jobs that fell due
(and sweep the flow outbox promote finds entries in).

Each call loops over bounded script calls (reap_batch, promote_batch jobs at most), so no single
call holds the server for long; the supervisor decides which queues, and when.
"""

from __future__ import annotations

import logging

from structlog.typing import FilteringBoundLogger

from emq_worker.beat.outbox import OutboxSweep
from emq_worker.beat.state import WorkerState
from emq_worker.protocol.queue import Queue


class QueueUpkeep:
    def __init__(
        self, state: WorkerState, reap_max_attempts: int, log: FilteringBoundLogger
    ) -> None:
        self.settings = state.settings
        self.reap_max_attempts = reap_max_attempts
        self.counters = state.counters
        self.clock = state.clock
        self.log = log
        self._log_jobs = log.is_enabled_for(logging.INFO)
        self.outbox = OutboxSweep(log)
        self.released_parents = 0
        """Flow parents the outbox sweeps released to pending (a burst worker is not idle then)."""

    async def reap(self, queue: Queue, budget_ends: float) -> None:
        """Reap in batches until caught up or until `budget_ends` (monotonic) has passed."""
        more = True
        while more:
            result = await queue.reap(self.settings.reap_batch, self.reap_max_attempts)
            self.counters.reaped += result.returned
            self.counters.reaped_dead += result.dead
            if result.returned or result.dead:
                self.counters.by_queue[(queue.name, "reaped")] += result.returned + result.dead
            self.counters.phantoms += result.phantoms
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
            more = result.more and self.clock.monotonic() < budget_ends

    async def promote(self, queue: Queue) -> int | None:
        """Promote every scheduled job now due; returns ms until the next one, None if none.
        Then, when promote saw entries in the queue's flow outbox, sweep it (beat/outbox.py)."""
        while True:
            result = await queue.promote(self.settings.promote_batch)
            self.counters.promoted += result.promoted
            self.counters.phantoms += result.phantoms
            if not result.more:
                if result.outbox:
                    self.released_parents += await self.outbox.sweep(queue)
                return result.next_due_ms
