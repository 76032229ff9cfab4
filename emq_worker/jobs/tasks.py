"""The task registry: an App maps task names (and raw queues) to handlers and their policies."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, Unpack, overload

from emq_worker.errors import AppImportError, ConfigError, PayloadError, UnknownTaskError
from emq_worker.jobs.handles import AsyncTaskHandle, SyncTaskHandle, TaskHandle, unwrap
from emq_worker.jobs.policy import JobPolicy, PolicyOptions, declared_policy
from emq_worker.jobs.process_tasks import check_process_tasks, in_process
from emq_worker.protocol.keys import validate_queue_name

Handler = Callable[..., Awaitable[Any]] | Callable[..., Any]
F = TypeVar("F", bound=Handler)
P = ParamSpec("P")
R = TypeVar("R")
Executor = Literal["process"]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    fn: Handler
    is_async: bool
    signature: inspect.Signature
    policy: JobPolicy = field(default_factory=JobPolicy)
    """The task's declared policy (over the worker's defaults; a job's options go over it)."""
    in_process: bool = False
    """`executor="process"`: the handler runs in the worker's process pool (process_pool.py)."""
    keyword_names: tuple[frozenset[str], frozenset[str]] | None = field(
        init=False, repr=False, compare=False
    )
    """(required, accepted) kwargs names, for the cheap per-job check; None: use bind()."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "keyword_names", _keyword_names(self.signature))

    def parameters_text(self) -> str:
        """The kwargs the handler takes, as written: `a: int, b: int = 0` (for messages)."""
        shown = []
        for param in list(self.signature.parameters.values())[1:]:
            note = param.annotation
            if note is inspect.Parameter.empty:
                text = param.name
            else:
                text = f"{param.name}: {note if isinstance(note, str) else note.__name__}"
            if param.default is not inspect.Parameter.empty:
                text += f" = {param.default!r}"
            shown.append(("**" if param.kind is param.VAR_KEYWORD else "") + text)
        return ", ".join(shown)

    def check_kwargs(self, ctx: object, kwargs: dict[str, Any]) -> None:
        """Raise PayloadError when the payload's kwargs cannot call this handler."""
        names = self.keyword_names
        if names is not None:
            required, accepted = names
            if required <= kwargs.keys() <= accepted:
                return  # the common case, checked without building a BoundArguments
        try:
            self.signature.bind(ctx, **kwargs)
        except TypeError as exc:
            raise PayloadError(
                f"kwargs do not fit task {self.name!r}{self.signature}: {exc}"
            ) from exc


@dataclass(slots=True)
class App:
    """Handlers by name: `@app.task` (JSON envelope), `@app.raw_handler("queue")` (raw bytes)."""

    tasks: dict[str, Task] = field(default_factory=dict)
    raw: dict[str, Task] = field(default_factory=dict)
    trace_parented: bool = False
    """With OpenTelemetry (the `otel` extra): each attempt's CONSUMER span is a child of the
    span that enqueued the job (one trace per request, attempts included) rather than, by
    default, the root of its own trace with a link to it."""

    # An async handler matches both overloads; the first (async) one is meant to win, which is
    # what mypy calls an unsafe overlap (the way typeshed types such pairs).
    @overload
    def task(  # type: ignore[overload-overlap]
        self, fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]], /
    ) -> AsyncTaskHandle[P, R]: ...

    @overload
    def task(self, fn: Callable[Concatenate[Any, P], R], /) -> SyncTaskHandle[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        executor: Executor | None = None,
        **policy: Unpack[PolicyOptions],
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Handler | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        executor: Executor | None = None,
        **policy: Unpack[PolicyOptions],
    ) -> TaskHandle[Any, Any] | TaskDecorator:
        """Register a handler `fn(ctx, **kwargs)` under `name` (default: its own name), and
        return its typed handle (still callable as the handler; `handle.enqueue(producer, ...)`
        enqueues it with the handler's own arguments, on `queue` by default).

        `max_attempts`, `backoff` and `timeout_ms` override the worker's defaults for this task;
        `result_ttl_ms` stores the handler's return value (JSON) for that long, for
        `Producer.result`. A producer can override each per job (`Producer.enqueue`).

        `executor="process"` runs a plain (CPU-bound) function in the worker's process pool
        instead of a thread: it must be a module-level function a spawned process can import.
        """
        decorator = TaskDecorator(self, name, queue, policy, executor)
        return decorator(fn) if fn is not None else decorator

    def add(self, task: Task) -> None:
        if task.name in self.tasks:
            raise ConfigError(f"task {task.name!r} is registered twice")
        self.tasks[task.name] = task

    def raw_handler(self, queue: str, **policy: Unpack[PolicyOptions]) -> Callable[[F], F]:
        """Bind `queue` to one handler `fn(ctx)` that reads `ctx.payload` as raw bytes
        (for jobs enqueued by other EchoMQ clients)."""
        validate_queue_name(queue)

        declared = declared_policy(f"task {queue!r}", policy)

        def register(handler: F) -> F:
            self.raw[queue] = _make_task(queue, handler, declared)
            return handler

        return register

    def most_attempts(self, default: int) -> int:
        """The largest max_attempts any handler may use: the reaper's crash-loop cap, so a lapsed
        lease never dead-letters a job that its task would still retry."""
        declared = [t.policy.max_attempts for t in (*self.tasks.values(), *self.raw.values())]
        return max([default, *(n for n in declared if n is not None)])

    def lookup(self, name: str) -> Task:
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTaskError(f"unknown task {name!r} (registered: {known})") from None


class TaskDecorator:
    """`@app.task(...)` with options: registers the handler and returns its typed handle."""

    def __init__(
        self,
        app: App,
        name: str | None,
        queue: str | None,
        policy: PolicyOptions,
        executor: Executor | None = None,
    ) -> None:
        if queue is not None:
            validate_queue_name(queue)
        self.app, self.name, self.queue, self.policy = app, name, queue, policy
        self.executor = executor

    # As App.task: the async overload is meant to win.
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]], /
    ) -> AsyncTaskHandle[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[Any, P], R], /) -> SyncTaskHandle[P, R]: ...

    def __call__(self, fn: Handler, /) -> TaskHandle[Any, Any]:
        handler = unwrap(fn)
        name = self.name or handler.__name__
        task = _make_task(name, handler, declared_policy(f"task {name!r}", self.policy))
        if self.executor is not None:
            task = in_process(task, self.executor)
        self.app.add(task)
        kind = AsyncTaskHandle if task.is_async else SyncTaskHandle
        return kind(task.name, handler, self.queue, {})


def _keyword_names(
    signature: inspect.Signature,
) -> tuple[frozenset[str], frozenset[str]] | None:
    """(required, accepted) keyword names after the context parameter, or None when the
    signature needs the general check (*args, **kwargs, positional-only parameters)."""
    params = list(signature.parameters.values())[1:]
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if not signature.parameters or any(p.kind not in keyword_kinds for p in params):
        return None
    required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)
    return required, frozenset(p.name for p in params)


def _make_task(name: str, fn: Handler, policy: JobPolicy) -> Task:
    return Task(
        name=name,
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        signature=inspect.signature(fn),
        policy=policy,
    )


def load_app(path: str, app_dir: str | None = None) -> App:
    """Import `module:attr` (`module` alone means `module:app`, as uvicorn, arq and celery
    read it) and return the App it names, or raise AppImportError saying why.

    `app_dir` goes first on sys.path (as uvicorn's --app-dir): a console script's sys.path starts
    with its own bin directory, not the working directory.
    """
    if app_dir is not None:
        directory = os.path.abspath(app_dir)
        if directory not in sys.path:
            sys.path.insert(0, directory)
    app = _import(path, "--app", default_attr="app")
    if not isinstance(app, App):
        raise AppImportError(
            f"--app {path!r} must name an emq_worker.App; got {type(app).__name__}"
        )
    check_process_tasks(app)
    return app


def _import(path: str, flag: str, default_attr: str | None = None) -> Any:
    """The attribute `module:attr` names (`module` alone names `default_attr`, when given).
    Raises AppImportError naming the flag: a malformed path, a module whose import fails (any
    exception of its own: a SyntaxError, a NameError...), or a missing attribute."""
    module_name, sep, attr = path.partition(":")
    if not sep and default_attr is not None:
        attr = default_attr
    if not module_name or not attr:
        shape = "module.path[:attribute]" if default_attr else "module.path:attribute"
        raise AppImportError(f"{flag} must look like {shape}; got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own import fails: a SyntaxError, a NameError, ...
        raise AppImportError(
            f"cannot import module {module_name!r} for {flag} {path!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if not hasattr(module, attr):
        raise AppImportError(f"{flag} {path!r}: module {module_name!r} has no attribute {attr!r}")
    return getattr(module, attr)


def with_raw_tasks(app: App, specs: Sequence[str], served: Sequence[str]) -> App:
    """A copy of `app` with each `QUEUE=module:function` of `specs` (`--raw-task`) bound as
    that queue's raw handler, as `App.raw_handler` binds it: the handler reads `ctx.payload` as
    raw bytes (for jobs other EchoMQ clients enqueue). The app's own binding for a queue, or a
    queue the worker does not serve (`served`), is refused with a ConfigError naming it."""
    bound = App(tasks=dict(app.tasks), raw=dict(app.raw), trace_parented=app.trace_parented)
    for spec in specs:
        queue, sep, path = spec.partition("=")
        if not sep or not queue or not path:
            raise ConfigError(f"--raw-task must look like QUEUE=module.path:function; got {spec!r}")
        if queue not in served:
            raise ConfigError(f"--raw-task {spec!r}: queue {queue!r} is not served (--queue)")
        if queue in bound.raw:
            raise ConfigError(f"--raw-task {spec!r}: queue {queue!r} already has a raw handler")
        handler = _import(path, "--raw-task")
        if not callable(handler):
            raise ConfigError(
                f"--raw-task {spec!r} must name a function fn(ctx); got {type(handler).__name__}"
            )
        bound.raw_handler(queue)(handler)
    return bound
