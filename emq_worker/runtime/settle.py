"""The settle batcher: finished jobs hand their outcome over, and every outcome that is ready
for a queue is written in one `settle` script call, so a busy worker pays a round trip per batch
rather than per job. Writes are fenced per job by the script; the reply decides what became of
each job, and only then is its lease let go.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import anyio

from emq_worker.jobs import tracing
from emq_worker.observe.log import get_logger
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import SettleResult, SettleStatus
from emq_worker.protocol.values import Completion, Outcome
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.state import WorkerState
from emq_worker.valkey.failures import RETRYABLE, describe, fatal

MAX_BATCH = 250
"""Outcomes per script call: bounds how long one call holds the server."""
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0


class Handover(NamedTuple):
    lease: Lease
    outcome: Outcome
    task: str
    seconds: float | None = None
    """How long the handler ran; None when no handler ran (the job could not be decoded)."""


class SettleBatcher:
    def __init__(self, state: WorkerState) -> None:
        self.state = state
        self.log = get_logger()
        self._log_jobs = self.log.is_enabled_for(logging.INFO)
        """Whether each completion is logged (info); at warning, the hot path logs nothing."""
        self._waiting: dict[str, list[Handover]] = {}
        self._ready = anyio.Event()
        self._writing: set[str] = set()
        """Queues whose batch is being written: their next outcomes wait for it."""

    def submit(
        self, lease: Lease, outcome: Outcome, task: str, seconds: float | None = None
    ) -> None:
        """Hand a finished job's outcome over; its lease stays held (and renewed) until written."""
        self.state.book.mark_settling(lease)
        if seconds is not None:
            self.state.pace.handled(seconds, self.state.clock.monotonic())
        handover = Handover(lease, outcome, task, seconds)
        self._waiting.setdefault(lease.job.queue, []).append(handover)
        self._ready.set()
        self.state.slots.fire()  # the handler is done: its slot is free for the next claim

    async def run(self) -> None:
        """Write each queue's outcomes as they come, one batch in flight per queue: a queue whose
        batch is retrying (its node lost until a replica leads) holds back no other queue's."""
        async with anyio.create_task_group() as group:
            while True:
                await self._ready.wait()
                self._ready = anyio.Event()
                for name in [name for name in self._waiting if name not in self._writing]:
                    self._writing.add(name)
                    group.start_soon(self._flush_queue, name, self._waiting.pop(name))

    async def _flush_queue(self, name: str, handovers: list[Handover]) -> None:
        """Write one queue's outcomes (in chunks of MAX_BATCH, side by side); what was handed
        over for it meanwhile goes in its next batch."""
        try:
            async with anyio.create_task_group() as group:
                for start in range(0, len(handovers), MAX_BATCH):
                    chunk = handovers[start : start + MAX_BATCH]
                    group.start_soon(self._flush, self.state.queues[name], chunk)
        finally:
            self._writing.discard(name)
            if name in self._waiting:
                self._ready.set()

    async def _flush(self, queue: Queue, handovers: list[Handover]) -> None:
        try:
            results = await self._write(queue, handovers)
            for handover, result in zip(handovers, results, strict=True):
                self._record(handover, result)
                self.state.book.discard(handover.lease)
        finally:
            for handover in handovers:  # written, refused, or cut short by a forced stop
                tracing.end(handover.lease.span)

    async def _write(
        self, queue: Queue, handovers: list[Handover]
    ) -> list[SettleResult] | list[None]:
        """Send the batch, retrying through connection trouble until the settle timeout."""
        outcomes = [handover.outcome for handover in handovers]
        pause = FIRST_PAUSE_S
        with anyio.move_on_after(self.state.settings.settle_timeout_ms / 1000):
            while True:
                try:
                    return await queue.settle(
                        outcomes,
                        self.state.settings.receipt_ms,
                        self.state.settings.completed_ttl_ms,
                    )
                except RETRYABLE as exc:  # READONLY, MISCONF too: retried, then left to the reaper
                    if fatal(exc):
                        raise
                    self.log.warning(
                        "settle_retrying", queue=queue.name, jobs=len(outcomes), error=describe(exc)
                    )
                    await anyio.sleep(pause)
                    pause = min(pause * 2, MAX_PAUSE_S)
        return [None] * len(handovers)

    def _record(self, handover: Handover, result: SettleResult | None) -> None:
        if (
            not self._log_jobs
            and result is not None
            and result.status is SettleStatus.OK
            and isinstance(handover.outcome, Completion)
        ):
            counters = self.state.counters  # the hot path: nothing to log above info
            counters.completed += 1
            job = handover.lease.job
            counters.settled(
                job.queue, handover.task, "completed", handover.seconds, (job.id, job.token)
            )
            return
        job = handover.lease.job
        facts = {"queue": job.queue, "job_id": job.id, "attempts": job.token, "task": handover.task}
        if result is None:
            self.log.error(
                "settle_failed",
                reason="no reply within the settle timeout; the reaper returns the job after its "
                "lease",
                **facts,
            )
            return
        if result.status in (SettleStatus.OK, SettleStatus.SETTLED):
            self._count(handover, result, facts)
        elif result.status is SettleStatus.STALE:
            self.state.counters.fenced += 1
            self.state.counters.by_queue[(job.queue, "fenced")] += 1
            self.log.warning("write_fenced", stale_token=job.token, current=result.detail, **facts)
            tracing.fenced(handover.lease.span, job.id, job.token, "settle", result.detail)
        else:
            self.log.warning(
                "settle_refused", status=str(result.status), detail=result.detail, **facts
            )
            tracing.fenced(
                handover.lease.span, job.id, job.token, "settle", result.detail, str(result.status)
            )

    def _count(self, handover: Handover, result: SettleResult, facts: dict[str, object]) -> None:
        outcome = handover.outcome
        repeated = result.status is SettleStatus.SETTLED
        if isinstance(outcome, Completion):
            self.state.counters.completed += 1
            self._settled(handover, "completed")
            self.log.info("job_completed", repeated=repeated, **facts)
            return
        if result.detail == "dead":
            self.state.counters.dead_lettered += 1
            self._settled(handover, "dead_lettered")
            self.log.warning(
                "job_dead",
                error=outcome.error,
                traceback=outcome.trace or None,
                repeated=repeated,
                **facts,
            )
        else:
            self.state.counters.retried += 1
            self._settled(handover, "retried")
            self.log.warning(  # a failure, if not yet a final one: as job_dead, not info
                "job_retried",
                to=result.detail,
                delay_ms=outcome.delay_ms,
                error=outcome.error,
                traceback=outcome.trace or None,
                repeated=repeated,
                **facts,
            )

    def _settled(self, handover: Handover, outcome: str) -> None:
        job, error = handover.lease.job, getattr(handover.outcome, "error", "")
        self.state.counters.settled(
            job.queue, handover.task, outcome, handover.seconds, (job.id, job.token), error
        )
