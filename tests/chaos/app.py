"""The chaos app, loaded by worker processes with `--app tests.chaos.app:app --app-dir <repo>`.

Every handler records `start` on entry and `done` just before it returns normally (ledger.py).
"""

from __future__ import annotations

import os
import signal
import time

import anyio

from emq_worker import App, JobContext
from tests.chaos.ledger import DONE, START, record

app = App()

POISON_MAX_ATTEMPTS = 3


@app.task
async def work(ctx: JobContext, ms: int = 0) -> None:
    """Hold the job `ms` milliseconds without blocking the event loop."""
    record(START, ctx)
    if ms:
        await anyio.sleep(ms / 1000)
    record(DONE, ctx)


@app.task
async def block_loop(ctx: JobContext, ms: int, attempts: int = 1) -> None:
    """Block the event loop itself for `ms` (a handler doing sync I/O in async code), on the
    first `attempts` attempts only, so a re-run can finish."""
    record(START, ctx)
    if ctx.attempt <= attempts:
        time.sleep(ms / 1000)  # noqa: ASYNC251 - blocking the loop is the point
    record(DONE, ctx)


@app.task
def block_thread(ctx: JobContext, ms: int) -> None:
    """A sync handler: the worker runs it in a thread, so the loop stays free."""
    record(START, ctx)
    time.sleep(ms / 1000)
    record(DONE, ctx)


@app.task(max_attempts=POISON_MAX_ATTEMPTS)
async def poison(ctx: JobContext) -> None:
    """Kill this worker process on every attempt, as a segfaulting extension would."""
    record(START, ctx)
    os.kill(os.getpid(), signal.SIGKILL)
