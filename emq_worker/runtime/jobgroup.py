"""The group that owns running jobs: one asyncio task per job, held structurally.

It is a task group in the structured-concurrency sense, cut down to what jobs need, because
anyio's general one costs about a third of a no-op job's CPU: leaving the `async with` waits for
every job; `cancel()` cancels them all; a job task that ends in an exception (a bug: handlers'
exceptions are caught by the runner) cancels the others and is raised when the group exits; and
a cancellation of the code that owns the group cancels the jobs and waits for them before it
propagates. A lost lease cancels exactly its own job's task (see lease.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

import anyio


class JobGroup:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._all_done = asyncio.Event()
        self._all_done.set()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, job: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        task = asyncio.get_running_loop().create_task(job(*args))
        self._tasks.add(task)
        self._all_done.clear()
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._all_done.set()
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
            self.cancel()

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def __aenter__(self) -> JobGroup:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.cancel()
        try:
            await self._all_done.wait()
        except BaseException:
            # The owner was cancelled (or failed) while waiting: the jobs go too, and the owner
            # waits for them to finish unwinding before its own cancellation goes on.
            self.cancel()
            with anyio.CancelScope(shield=True):
                await self._all_done.wait()
            raise
        if self._failure is not None:
            raise self._failure
