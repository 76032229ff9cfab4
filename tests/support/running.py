"""Run a Worker inside the test body (not a fixture: task groups must not span a yield)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from emq_worker import App, Worker, WorkerSettings


@asynccontextmanager
async def running_worker(settings: WorkerSettings, app: App) -> AsyncIterator[Worker]:
    worker = Worker(settings, app)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        with anyio.fail_after(10):
            await worker.ready.wait()
        try:
            yield worker
        finally:
            worker.request_stop()
