"""Run a Worker inside the test body (not a fixture: task groups must not span a yield)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from emq_worker import App, Worker, WorkerSettings
from emq_worker.observe.sdnotify import Notifier
from emq_worker.retry import Fixed
from tests.support.apps import HoldingApp


def worker_settings(queues: str | tuple[str, ...], url: str, **overrides: Any) -> WorkerSettings:
    """Settings for an in-process test worker: a short beat, a short retry delay."""
    options: dict[str, Any] = {
        "queues": (queues,) if isinstance(queues, str) else queues,
        "redis_url": url,
        "beat_ms": 100,
        "lease_ms": 3_000,
        "backoff": Fixed(10),
    }
    options.update(overrides)
    return WorkerSettings(**options)


@asynccontextmanager
async def running_worker(
    settings: WorkerSettings, app: App, *, notifier: Notifier | None = None
) -> AsyncIterator[Worker]:
    worker = Worker(settings, app, notifier=notifier)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        with anyio.fail_after(10):
            await worker.ready.wait()
        try:
            yield worker
        finally:
            worker.request_stop()


@asynccontextmanager
async def holding_worker(settings: WorkerSettings) -> AsyncIterator[tuple[Worker, HoldingApp]]:
    """`running_worker` with a `HoldingApp`: the job of its task `hold` stays held until the test
    sets `release`, or leaves the block (released first, so the stop does not wait for it)."""
    holding = HoldingApp()
    async with running_worker(settings, holding.app) as worker:
        try:
            yield worker, holding
        finally:
            holding.release.set()
