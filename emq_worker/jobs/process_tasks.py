"""Which tasks run in the process pool (`@app.task(executor="process")`), and how a pool process
finds a handler: by its module and qualified name, as any importer would (a spawned process
inherits nothing else). So a process task must be a plain, module-level function; both are
checked when the app is built and imported, not when the first job runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from emq_worker.errors import ConfigError
from emq_worker.jobs.handles import unwrap

if TYPE_CHECKING:
    from emq_worker.jobs.tasks import App, Task

Handler = Callable[..., Any]


def importable_name(fn: Handler) -> str | None:
    """Why a spawned process cannot import `fn` by its name (a lambda, a function defined inside
    another), or None when it can."""
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if not qualname or "<" in qualname or not module:
        return (
            f"{module}.{qualname or repr(fn)} is not a module-level function "
            "(a lambda, or a function defined inside another)"
        )
    return None


def handler_at(module: str, qualname: str) -> Handler:
    """The handler `module.qualname` names (a task handle stands for its function)."""
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    handler: Handler = unwrap(target)
    return handler


def resolves_to(fn: Handler) -> str | None:
    """Why importing `fn` by its name in a pool process would not give `fn` back, or None."""
    problem = importable_name(fn)
    if problem is not None:
        return problem
    try:
        found = handler_at(fn.__module__, fn.__qualname__)
    except (ImportError, AttributeError) as exc:
        return f"{fn.__module__}.{fn.__qualname__} cannot be imported by name: {exc}"
    if found is not fn:
        return f"{fn.__module__}.{fn.__qualname__} names another object than the handler"
    return None


def in_process(task: Task, executor: str) -> Task:
    """`task` set to run in the process pool, or a ConfigError saying why it cannot."""
    if executor != "process":
        raise ConfigError(f"task {task.name!r}: executor must be 'process'; got {executor!r}")
    if task.is_async:
        raise ConfigError(
            f"task {task.name!r}: executor='process' runs plain functions (def); "
            "an async handler already runs on the event loop"
        )
    problem = importable_name(task.fn)
    if problem is not None:
        raise ConfigError(
            f"task {task.name!r}: executor='process' needs a handler a spawned process can "
            f"import by name; {problem}"
        )
    return replace(task, in_process=True)


def check_process_tasks(app: App) -> None:
    """Once the app is imported: every process task's handler is what its module and name give
    back in a pool process (not shadowed, renamed or wrapped away); else a ConfigError."""
    for task in app.tasks.values():
        problem = resolves_to(task.fn) if task.in_process else None
        if problem is not None:
            raise ConfigError(f"task {task.name!r}: executor='process': {problem}")
