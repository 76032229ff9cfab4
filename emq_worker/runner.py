"""Runs one claimed job: decode, call the handler under its timeout, hand the outcome over.

A handler's exception becomes a failure; it never escapes into the job group. The job's task is
registered with its lease: a lost lease cancels it, and its late result is never written. The
outcome goes to the settle batcher, which writes it fenced, outside the job's task.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from dataclasses import dataclass
from typing import Any

import anyio

from emq_worker import codec
from emq_worker.config import WorkerSettings
from emq_worker.context import JobContext
from emq_worker.errors import PayloadError, UnknownTaskError
from emq_worker.lease import Lease
from emq_worker.log import get_logger
from emq_worker.outcomes import ClaimedJob
from emq_worker.queue import Completion, Failure, Outcome
from emq_worker.retry import delay_ms
from emq_worker.settle import SettleBatcher
from emq_worker.tasks import App, Task


@dataclass(frozen=True, slots=True)
class Call:
    task: Task
    ctx: JobContext
    kwargs: dict[str, Any]


CANCELLED = "cancelled by an operator"


class JobRunner:
    def __init__(
        self,
        app: App,
        batcher: SettleBatcher,
        settings: WorkerSettings,
        rng: random.Random,
    ) -> None:
        self.app = app
        self.batcher = batcher
        self.settings = settings
        self.rng = rng
        self.threads = anyio.CapacityLimiter(settings.concurrency)
        self.log = get_logger()

    async def run(self, lease: Lease) -> None:
        lease.task = asyncio.current_task()
        if lease.lost:
            return  # lost before it started: nothing ran, nothing to write
        job = lease.job
        if lease.cancel_requested:  # cancelled before it started: dead, without running it
            self.batcher.submit(lease, Failure(lease.held, 0, 0, CANCELLED), "(cancelled)")
            return
        try:
            call = self._prepare(job)
        except (PayloadError, UnknownTaskError) as exc:
            # Retrying cannot help a job nobody can decode or run: dead-letter it at once.
            self.batcher.submit(lease, Failure(lease.held, 0, 0, str(exc)), "(unrunnable)")
            return
        started = time.monotonic()
        outcome = await self._call(lease, call)
        seconds = time.monotonic() - started
        if outcome is None or lease.lost:  # lost: even if the handler swallowed its cancellation
            self.log.info(
                "job_abandoned",
                queue=job.queue,
                job_id=job.id,
                attempts=job.token,
                reason="lease lost; its result is not written",
            )
            return
        self.batcher.submit(lease, outcome, call.task.name, seconds)

    def _prepare(self, job: ClaimedJob) -> Call:
        raw = self.app.raw.get(job.queue)
        if raw is not None:
            return Call(raw, JobContext(job.queue, job.id, job.token, raw.name, job.payload), {})
        name, kwargs = codec.decode(job.payload)
        task = self.app.lookup(name)
        ctx = JobContext(job.queue, job.id, job.token, name, job.payload)
        task.check_kwargs(ctx, kwargs)
        return Call(task, ctx, kwargs)

    async def _call(self, lease: Lease, call: Call) -> Outcome | None:
        """The handler's outcome, or None when the lease was lost while it ran."""
        task = call.task
        timeout_ms = task.timeout_ms or self.settings.job_timeout_ms
        timer = asyncio.timeout(timeout_ms / 1000)
        try:
            async with timer:
                if task.is_async:
                    await task.fn(call.ctx, **call.kwargs)
                else:
                    await anyio.to_thread.run_sync(
                        functools.partial(task.fn, call.ctx, **call.kwargs),
                        abandon_on_cancel=True,
                        limiter=self.threads,
                    )
        except asyncio.CancelledError:
            if not (lease.lost or lease.cancel_requested):
                raise  # the worker is stopping: the lease is handed back, not settled
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            if lease.lost:
                return None
            return Failure(lease.held, 0, 0, CANCELLED)
        except Exception as exc:
            if timer.expired():
                return self._failure(lease, task, f"timed out after {timeout_ms} ms")
            return self._failure(lease, task, f"{type(exc).__name__}: {exc}")
        return Completion(lease.held)

    def _failure(self, lease: Lease, task: Task, error: str) -> Failure:
        max_attempts = task.max_attempts or self.settings.max_attempts
        policy = task.backoff or self.settings.backoff
        return Failure(lease.held, delay_ms(policy, lease.job.token, self.rng), max_attempts, error)
