"""Runs one claimed job: decode, call the handler under its timeout, hand the outcome over.

A handler's exception becomes a failure; it never escapes into the job group. The job's task is
registered with its lease: a lost lease cancels it, and its late result is never written. The
outcome goes to the settle batcher, which writes it fenced, outside the job's task.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any, NamedTuple

import anyio
from redis.exceptions import RedisError

from emq_worker.errors import PayloadError, UnknownTaskError
from emq_worker.jobs import codec, tracing
from emq_worker.jobs.context import JobContext, JobServices
from emq_worker.jobs.policy import Policy, resolve
from emq_worker.jobs.process_pool import ProcessPool
from emq_worker.jobs.process_tasks import check_process_tasks
from emq_worker.jobs.results import encode_result
from emq_worker.jobs.tasks import App, Task
from emq_worker.jobs.tracebacks import bounded_trace
from emq_worker.observe.log import get_logger
from emq_worker.protocol.names import Field
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.values import Completion, Failure, Outcome
from emq_worker.retry import delay_ms
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.prestart import CHECK_AFTER_SHARE, needs_check, still_held
from emq_worker.runtime.settle import SettleBatcher
from emq_worker.runtime.state import WorkerState
from emq_worker.runtime.timeouts import JobTimeouts


class Call(NamedTuple):
    """One job's call (a tuple: made per job on the hot path, where a frozen dataclass's
    per-field `object.__setattr__` shows)."""

    task: Task
    ctx: JobContext
    kwargs: dict[str, Any]
    policy: Policy
    """The worker's defaults, then the task's policy, then the producer's per-job options."""
    trace: dict[str, str] | None = None
    """The enqueue's W3C trace context, from the envelope (tracing.py)."""
    flow_child: bool = False
    """Hand the return value to the job's flow parent (the envelope says it is a flow child)."""
    raw: bool = False


CANCELLED = "cancelled by an operator"


def _withdraw_cancel() -> bool:
    """Take back the cancellation a job's timeout asked for (timeouts.py); True when no other
    one (a lost lease's, an operator's, the worker's stop) is pending."""
    current = asyncio.current_task()
    return current is None or current.uncancel() == 0


class JobRunner:
    def __init__(self, state: WorkerState, app: App, batcher: SettleBatcher) -> None:
        self.state = state
        self.app = app
        self.batcher = batcher
        self.threads = anyio.CapacityLimiter(state.settings.concurrency)
        self.pool = ProcessPool(state.settings.process_pool or os.cpu_count() or 1)
        """For `executor="process"` tasks; it starts no process until one of them runs."""
        check_process_tasks(app)
        self.timeouts = JobTimeouts()
        self._task_policies: dict[int, Policy] = {}
        self._services: dict[str, JobServices] = {}
        """Per queue: what its jobs' contexts may use (one object, not one per job)."""
        self.log = get_logger()
        settings = state.settings
        checked_after_ms = settings.lease_ms / CHECK_AFTER_SHARE
        self._fresh_s = min(checked_after_ms, settings.lease_ms - settings.stop_margin) / 1000
        """A lease confirmed less than this long ago needs no pre-start check (prestart.py):
        the common case, decided here without a call per job."""

    async def run(self, lease: Lease) -> None:
        lease.task = asyncio.current_task()
        if lease.lost:
            return  # lost before it started: nothing ran, nothing to write
        fresh = self.state.clock.monotonic() - lease.confirmed_at < self._fresh_s
        if not fresh and not await self._still_held(lease):
            return
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
        lease.started = True  # from here the local deadline stops it (deadlines.py)
        lease.span = call.ctx.span = span = tracing.start_attempt(
            job.queue,
            call.task.name,
            job.id,
            int(job.token),
            call.trace,
            parented=self.app.trace_parented,
        )
        started = time.monotonic()
        try:
            with tracing.current(span):
                outcome = await self._call(lease, call)
        except BaseException:
            tracing.end(span)  # the worker is stopping: the lease is handed back
            raise
        seconds = time.monotonic() - started
        if outcome is None or lease.lost:  # lost: even if the handler swallowed its cancellation
            self.log.info(
                "job_abandoned",
                queue=job.queue,
                job_id=job.id,
                attempts=job.token,
                reason="lease lost; its result is not written",
            )
            tracing.end(span)
            return
        if isinstance(outcome, Failure):
            tracing.failed(span, outcome.error)
        self.batcher.submit(lease, outcome, call.task.name, seconds)  # it ends the span

    async def _still_held(self, lease: Lease) -> bool:
        """False when the lease, last confirmed over half a lease ago (the worker stalled since
        the claim or the hand-off, or the claim was answered late), turns out lost or cannot be
        confirmed past its local deadline: the job is dropped unstarted (prestart.py)."""
        now = self.state.clock.monotonic()
        queue = self.state.queues.get(lease.job.queue)
        if queue is None or not needs_check(lease, self.state.settings, now):
            return True
        try:
            held = await still_held(lease, queue, self.state.settings, now)
        except asyncio.CancelledError:
            if not absorb_cancel(lease):
                raise  # the worker is stopping: the lease is handed back
            return not lease.lost  # cancelled: run() settles it dead; lost: the sweep dropped it
        if held:
            return not lease.lost  # (lost meanwhile to the sweep: it dropped the lease itself)
        self.state.give_up(lease, cancel=False)  # (this very task: nothing to cancel)
        return False

    def _prepare(self, job: ClaimedJob) -> Call:
        services = self._services.get(job.queue)
        if services is None:
            queue = self.state.queues.get(job.queue)
            services = JobServices(queue, self.state.handler_client)
            if queue is not None:
                self._services[job.queue] = services
        raw = self.app.raw.get(job.queue)
        if raw is not None:
            ctx = JobContext(job, raw.name, services)
            return Call(raw, ctx, {}, self._policy_of(raw), raw=True)
        message = codec.decode_message(job.payload)
        task = self.app.lookup(message.task)
        ctx = JobContext(job, message.task, services)
        task.check_kwargs(ctx, message.kwargs)
        options = message.options
        policy = (
            self._policy_of(task) if options is None else resolve(self._policy_of(task), options)
        )
        return Call(task, ctx, message.kwargs, policy, message.trace, message.flow_child)

    def _policy_of(self, task: Task) -> Policy:
        """The task's policy over the worker's defaults, resolved once per task."""
        policy = self._task_policies.get(id(task))
        if policy is None:
            policy = self._task_policies[id(task)] = resolve(
                self.state.settings.policy, task.policy
            )
        return policy

    async def _call(self, lease: Lease, call: Call) -> Outcome | None:
        """The handler's outcome, or None when the lease was lost while it ran."""
        if call.task.in_process:
            return await self._call_in_process(lease, call)
        timed_out = f"timed out after {call.policy.timeout_ms} ms"
        try:
            value = await self._timed(lease, call)
        except asyncio.CancelledError as exc:
            if lease.timed_out and _withdraw_cancel():  # the timeout's, and no other
                return await self._failure(lease, call, timed_out, bounded_trace(exc))
            return _cancelled(lease, exc)
        except Exception as exc:
            trace = bounded_trace(exc)
            if lease.timed_out:  # (the handler turned its cancellation into another error)
                _withdraw_cancel()
                return await self._failure(lease, call, timed_out, trace)
            return await self._failure(lease, call, f"{type(exc).__name__}: {exc}", trace)
        if lease.timed_out:  # the handler swallowed its cancellation and returned: a completion
            _withdraw_cancel()
        ttl_ms = call.policy.result_ttl_ms
        if ttl_ms:
            return Completion(lease.held, self._result(lease, call, *encode_result(value)), ttl_ms)
        if call.flow_child or (call.raw and value is not None):
            return Completion(lease.held, self._flow_value(lease, call, value))  # parent only
        return Completion(lease.held)  # the common case: no result is kept

    def _flow_value(self, lease: Lease, call: Call, value: Any) -> bytes:
        """What a flow parent records for this child (stored nowhere else, TTL 0): a raw
        handler's bytes as they are (an EchoMQ parent reads them), else the stored form."""
        if call.raw and isinstance(value, bytes):
            return value
        return self._result(lease, call, *encode_result(value))

    async def _call_in_process(self, lease: Lease, call: Call) -> Outcome | None:
        """As _call, in the process pool: its timeout kills the process (process_pool.py)."""
        policy = call.policy
        fn, ctx, kwargs = call.task.fn, call.ctx, call.kwargs
        try:
            reply = await self.pool.run(
                fn, ctx, kwargs, policy.timeout_ms, want_result=bool(policy.result_ttl_ms)
            )
        except asyncio.CancelledError as exc:
            return _cancelled(lease, exc)
        if reply.error is not None:
            return await self._failure(lease, call, reply.error, reply.trace)
        if not policy.result_ttl_ms or reply.result is None:
            return Completion(lease.held)
        data = self._result(lease, call, reply.result, reply.result_error)
        return Completion(lease.held, data, policy.result_ttl_ms)

    async def _timed(self, lease: Lease, call: Call) -> Any:
        """The handler's return value; past the job's timeout its task is cancelled (timeouts.py).
        The watch ends before anything else is awaited, so a late tick cannot cancel the
        outcome's own writes."""
        task = call.task
        bucket = self.timeouts.start(lease, call.policy.timeout_ms / 1000)
        try:
            if task.is_async:
                return await task.fn(call.ctx, **call.kwargs)
            return await anyio.to_thread.run_sync(
                functools.partial(task.fn, call.ctx, **call.kwargs),
                abandon_on_cancel=True,
                limiter=self.threads,
            )
        finally:
            self.timeouts.stop(lease, bucket)

    def _result(self, lease: Lease, call: Call, data: bytes, error: str | None) -> bytes:
        if error is not None:
            job = lease.job
            self.log.warning(
                "result_not_stored",
                queue=job.queue,
                job_id=job.id,
                attempts=job.token,
                task=call.task.name,
                error=error,
            )
        return data

    async def _failure(self, lease: Lease, call: Call, error: str, trace: str) -> Failure:
        policy = call.policy
        attempt = await self._attempt_in_budget(lease)
        delay = delay_ms(policy.backoff, attempt, self.state.rng)
        return Failure(lease.held, delay, policy.max_attempts, error, trace)

    async def _attempt_in_budget(self, lease: Lease) -> int:
        """The attempt counted from the job's last `dead retry` (which records attempts_base),
        so a retried dead job backs off as on its first attempts. Read only for a failure after
        a first attempt (the slow path); on any Redis error the absolute count stands."""
        job = lease.job
        attempt = int(job.token)
        queue = self.state.queues.get(job.queue)
        if attempt == 1 or queue is None:
            return attempt
        try:
            base = await queue.client.hget(queue.keys.job(job.id), Field.ATTEMPTS_BASE)
        except RedisError:
            return attempt
        except asyncio.CancelledError:
            if not absorb_cancel(lease):
                raise  # the worker is stopping: the lease is handed back, not settled
            return attempt
        text = base.decode() if isinstance(base, bytes) else base
        return max(1, attempt - int(text)) if text and text.isdigit() else attempt


def absorb_cancel(lease: Lease) -> bool:
    """In a job's own task that caught a cancellation: True when it came from the job's lease
    (lost, or an operator's cancel) and is absorbed, so the task can say what became of the job;
    False when the worker is stopping, which the caller raises on (the lease is handed back)."""
    if not (lease.lost or lease.cancel_requested):
        return False
    current = asyncio.current_task()
    if current is not None:
        current.uncancel()
    return True


def _cancelled(lease: Lease, exc: asyncio.CancelledError) -> Outcome | None:
    """A running handler was cancelled: by its lost lease (None: nothing is written), by an
    operator's cancel (the job goes dead), or by the worker stopping (raised on: the lease is
    handed back, not settled)."""
    if not absorb_cancel(lease):
        raise exc
    if lease.lost:
        return None
    return Failure(lease.held, 0, 0, CANCELLED)
