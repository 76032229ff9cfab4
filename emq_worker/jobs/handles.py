"""Typed task handles: what `@app.task` returns.

A handle is still the handler (calling it calls the function, as before), and it enqueues jobs
for its task with the handler's own parameters, which mypy checks through `ParamSpec`:

    await charge.enqueue(producer, order_id="A1", amount=1200)
    await charge.with_options(queue="urgent", delay_ms=500).enqueue(producer, order_id="A1", ...)

The per-job options are set by `with_options`, not by keywords of `enqueue` itself: PEP 612
allows no parameter after `*args: P.args` (mypy: "Arguments not allowed after ParamSpec.args"),
so options next to the handler's keywords would cost the type check of the handler's keywords.
The arguments are bound to the handler's signature before anything is written: a missing or
unknown one raises TaskArgumentError naming the task and the argument.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Self, TypeVar, Unpack, cast

from emq_worker.errors import ConfigError, TaskArgumentError
from emq_worker.jobs.options import ENQUEUE_NAMES, EnqueueOptions, check_names, given_options
from emq_worker.jobs.producer import Enqueued, Producer
from emq_worker.jobs.sync_producer import SyncProducer
from emq_worker.protocol.names import JobId

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JobHandle(Generic[R]):
    """One enqueued job of a typed task: its id, and its result typed as the handler returns
    (the value as JSON carried it back: a dict for a dict, a list for a tuple)."""

    producer: Producer
    queue: str
    job_id: JobId
    duplicate: bool
    """True when nothing was enqueued (see `Enqueued.duplicate`); `job_id` is the job there."""

    async def result(self, *, timeout_s: float = 30.0) -> R:
        """`Producer.result` for this job (the task or the enqueue must set result_ttl_ms):
        waits up to `timeout_s` seconds."""
        return cast(R, await self.producer.result(self.job_id, queue=self.queue, timeout=timeout_s))


@dataclass(frozen=True, slots=True)
class SyncJobHandle(Generic[R]):
    """`JobHandle` for code without an event loop (over a `SyncProducer`)."""

    producer: SyncProducer
    queue: str
    job_id: JobId
    duplicate: bool

    def result(self, *, timeout_s: float = 30.0) -> R:
        return cast(R, self.producer.result(self.job_id, queue=self.queue, timeout=timeout_s))


class TaskHandle(Generic[P, R]):
    """The task `name` with its handler's parameters `P` and return type `R`."""

    __name__: str
    __wrapped__: Callable[..., Any]

    def __init__(
        self, name: str, fn: Callable[..., Any], queue: str | None, options: dict[str, Any]
    ) -> None:
        self.name = name
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.queue = queue
        self.options = options
        # The handler's name, docstring and __wrapped__, as a decorator's result should carry.
        functools.update_wrapper(cast(Callable[..., Any], self), fn)

    def with_options(self, *, queue: str | None = None, **options: Unpack[EnqueueOptions]) -> Self:
        """A copy of this handle whose enqueues carry these options (`EnqueueOptions`, as
        `Producer.enqueue` takes them; None leaves one unset); `queue` replaces the task's
        default queue (`@app.task(queue=...)`)."""
        check_names(options, ENQUEUE_NAMES, "with_options")
        merged = self.options | given_options(options)
        return type(self)(self.name, self.fn, queue or self.queue, merged)

    async def enqueue(
        self, producer: Producer, /, *args: P.args, **kwargs: P.kwargs
    ) -> JobHandle[R]:
        """Enqueue one job of this task with the handler's arguments (the context apart)."""
        queue, job_kwargs = self._prepare(args, kwargs)
        enqueued = await producer.enqueue(queue, self.name, job_kwargs, **self.options)
        return JobHandle(producer, queue, enqueued.job_id, enqueued.duplicate)

    def enqueue_sync(
        self, producer: SyncProducer, /, *args: P.args, **kwargs: P.kwargs
    ) -> SyncJobHandle[R]:
        """`enqueue` over a `SyncProducer` (`with sync_producer(url) as producer: ...`)."""
        queue, job_kwargs = self._prepare(args, kwargs)
        enqueued: Enqueued = producer.enqueue(queue, self.name, job_kwargs, **self.options)
        return SyncJobHandle(producer, queue, enqueued.job_id, enqueued.duplicate)

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.queue is None:
            raise ConfigError(
                f"task {self.name!r} has no queue to enqueue on: give @app.task(queue=...) or "
                f"{self.name}.with_options(queue=...)"
            )
        return self.queue, job_kwargs(self.name, self.signature, args, kwargs)

    def __repr__(self) -> str:
        return f"<task {self.name!r}{call_shape(self.signature)} queue={self.queue!r}>"


class AsyncTaskHandle(TaskHandle[P, R]):
    """The handle of an `async def` handler: calling it returns the handler's coroutine."""

    def __call__(self, ctx: Any, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        return cast(Coroutine[Any, Any, R], self.fn(ctx, *args, **kwargs))


class SyncTaskHandle(TaskHandle[P, R]):
    """The handle of a plain `def` handler (run in a thread by the worker)."""

    def __call__(self, ctx: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, self.fn(ctx, *args, **kwargs))


def job_kwargs(
    name: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The envelope's kwargs for calling the handler `name` with `args` and `kwargs` (after its
    context), or TaskArgumentError naming the argument that does not fit."""
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TaskArgumentError(f"task {name!r}{call_shape(signature)}: {exc}") from None
    out: dict[str, Any] = {}
    for param_name, value in list(bound.arguments.items())[1:]:
        kind = signature.parameters[param_name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            # The envelope carries keyword arguments only (`handler(ctx, **kwargs)`).
            raise TaskArgumentError(
                f"task {name!r}{call_shape(signature)}: parameter {param_name!r} is "
                "positional-only; a job carries keyword arguments only"
            )
        else:
            out[param_name] = value
    return out


def call_shape(signature: inspect.Signature) -> str:
    """The handler's parameters after its context, without annotations: `(order_id, amount=1)`."""
    params = list(signature.parameters.values())[1:]
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in params]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def unwrap(fn: T) -> T:
    """The handler under a handle (registering a handle again registers its function)."""
    return cast(T, fn.fn) if isinstance(fn, TaskHandle) else fn
