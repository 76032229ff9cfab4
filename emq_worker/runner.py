"""Runs one claimed job: decode, call the handler under its timeout, settle the outcome fenced.

A handler's exception becomes a `fail`; it never escapes into the job group. When the job's lease
is lost, its cancel scope is cancelled and nothing is written for it. Outcome writes are shielded
and bounded, so a shutdown cannot cut a reply in half.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any

import anyio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker import codec
from emq_worker.config import WorkerSettings
from emq_worker.context import JobContext
from emq_worker.errors import PayloadError, UnknownTaskError
from emq_worker.lease import Lease, LeaseBook, SlotSignal
from emq_worker.log import get_logger
from emq_worker.metrics import Counters
from emq_worker.outcomes import ClaimedJob, SettleResult, SettleStatus
from emq_worker.queue import Queue
from emq_worker.retry import delay_ms
from emq_worker.tasks import App, Task


@dataclass(frozen=True, slots=True)
class Done:
    pass


@dataclass(frozen=True, slots=True)
class Failed:
    error: str
    poisoned: bool = False
    """An unknown task or an undecodable payload: dead-letter at once, retrying cannot help."""


Verdict = Done | Failed


@dataclass(frozen=True, slots=True)
class Call:
    task: Task
    ctx: JobContext
    kwargs: dict[str, Any]


class JobRunner:
    def __init__(
        self,
        app: App,
        queues: dict[str, Queue],
        book: LeaseBook,
        slots: SlotSignal,
        settings: WorkerSettings,
        counters: Counters,
        rng: random.Random,
    ) -> None:
        self.app = app
        self.queues = queues
        self.book = book
        self.slots = slots
        self.settings = settings
        self.counters = counters
        self.rng = rng
        self.threads = anyio.CapacityLimiter(settings.concurrency)

    async def run(self, lease: Lease) -> None:
        job = lease.job
        log = get_logger(queue=job.queue, job_id=job.id, attempts=job.token)
        task: Task | None = None
        with lease.scope:
            try:
                call = self._prepare(job, log)
            except (PayloadError, UnknownTaskError) as exc:
                verdict: Verdict = Failed(str(exc), poisoned=True)
            else:
                task = call.task
                verdict = await self._call(call)
        if lease.lost:
            log.info("job_abandoned", reason="lease lost; its result is not written")
            return
        lease.settling = True
        await self._settle(lease, task, verdict, log)
        self.book.discard(lease)
        self.slots.fire()

    def _prepare(self, job: ClaimedJob, log: Any) -> Call:
        raw = self.app.raw.get(job.queue)
        if raw is not None:
            ctx = JobContext(job.queue, job.id, job.token, raw.name, job.payload, log)
            return Call(raw, ctx, {})
        name, kwargs = codec.decode(job.payload)
        task = self.app.lookup(name)
        ctx = JobContext(job.queue, job.id, job.token, name, job.payload, log.bind(task=name))
        task.check_kwargs(ctx, kwargs)
        return Call(task, ctx, kwargs)

    async def _call(self, call: Call) -> Verdict:
        timeout_ms = call.task.timeout_ms or self.settings.job_timeout_ms
        call.ctx.log.debug("job_started")
        try:
            with anyio.move_on_after(timeout_ms / 1000) as timer:
                if call.task.is_async:
                    await call.task.fn(call.ctx, **call.kwargs)
                else:
                    await anyio.to_thread.run_sync(
                        functools.partial(call.task.fn, call.ctx, **call.kwargs),
                        abandon_on_cancel=True,
                        limiter=self.threads,
                    )
        except Exception as exc:
            return Failed(f"{type(exc).__name__}: {exc}")
        if timer.cancelled_caught:
            return Failed(f"timed out after {timeout_ms} ms")
        return Done()

    async def _settle(self, lease: Lease, task: Task | None, verdict: Verdict, log: Any) -> None:
        job = lease.job
        queue = self.queues[job.queue]
        receipt_ms = self.settings.receipt_ms
        result: SettleResult | None = None
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(self.settings.settle_timeout_ms / 1000),
        ):
            pause = 0.05
            while result is None:
                try:
                    if isinstance(verdict, Done):
                        result = await queue.complete(lease.held, receipt_ms)
                    else:
                        max_attempts, delay = self._retry_plan(job, task, verdict)
                        result = await queue.fail(
                            lease.held,
                            receipt_ms,
                            delay_ms=delay,
                            max_attempts=max_attempts,
                            error=verdict.error,
                        )
                except (RedisConnectionError, RedisTimeoutError) as exc:
                    log.warning("settle_retrying", error=str(exc), pause_ms=int(pause * 1000))
                    await anyio.sleep(pause)
                    pause = min(pause * 2, 1.0)
        if result is None:
            log.error(
                "settle_failed",
                reason="no reply within settle timeout; the reaper will "
                "return the job after its lease",
            )
            return
        self._record(job, verdict, result, log)

    def _retry_plan(self, job: ClaimedJob, task: Task | None, verdict: Failed) -> tuple[int, int]:
        if verdict.poisoned:
            return 0, 0
        max_attempts = (task.max_attempts if task else None) or self.settings.max_attempts
        policy = (task.backoff if task else None) or self.settings.backoff
        return max_attempts, delay_ms(policy, job.token, self.rng)

    def _record(self, job: ClaimedJob, verdict: Verdict, result: SettleResult, log: Any) -> None:
        if result.status in (SettleStatus.OK, SettleStatus.SETTLED):
            repeated = result.status is SettleStatus.SETTLED
            error = verdict.error if isinstance(verdict, Failed) else None
            outcome = result.detail or "completed"
            if outcome == "completed":
                self.counters.completed += 1
                log.info("job_completed", repeated=repeated)
            elif outcome == "dead":
                self.counters.dead_lettered += 1
                log.warning("job_dead", error=error, repeated=repeated)
            else:
                self.counters.retried += 1
                log.info("job_retried", to=outcome, error=error, repeated=repeated)
        elif result.status is SettleStatus.STALE:
            self.counters.fenced += 1
            log.warning("write_fenced", stale_token=job.token, current=result.detail)
        else:
            log.warning("settle_refused", status=str(result.status), detail=result.detail)
