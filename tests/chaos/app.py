"""The chaos app, loaded by worker processes with `--app tests.chaos.app:app --app-dir <repo>`.

Every handler records `start` on entry and `done` just before it returns normally (ledger.py).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio

from emq_worker import App, JobContext
from tests.chaos.ledger import DONE, START, STOPPED, record
from tests.support.wait import eventually

app = App()

POISON_MAX_ATTEMPTS = 3


@app.task
async def work(ctx: JobContext, ms: int = 0) -> None:
    """Hold the job `ms` milliseconds without blocking the event loop."""
    record(START, ctx)
    if ms:
        await anyio.sleep(ms / 1000)
    record(DONE, ctx)


RELEASE_WITHIN_S = 120.0


@app.task
async def hold(
    ctx: JobContext, ms: int = 0, again_ms: int = 0, release: str = "", poll_ms: int = 10
) -> None:
    """Hold the first attempt `ms` (later ones `again_ms`), or, with `release`, until the wall
    time written in that file (polled every `poll_ms`), so a test can end it at an instant it
    chooses (with `again_ms` too, only the first attempt waits for it). A cancellation is
    recorded as `stopped` (the instant the handler learnt it must stop)."""
    record(START, ctx)
    try:
        if release and (ctx.attempt == 1 or not again_ms):
            released_at = await _released_at(Path(release), poll_ms / 1000)
            await anyio.sleep(max(0.0, released_at - time.time()))
        else:
            await anyio.sleep((ms if ctx.attempt == 1 else again_ms) / 1000)
    except anyio.get_cancelled_exc_class():
        record(STOPPED, ctx)
        raise
    record(DONE, ctx)


def _written_time(path: Path) -> float | None:
    """The wall time in `path`, or None while it is not (wholly) written."""
    try:
        return float(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


async def _released_at(path: Path, poll_s: float | None = None) -> float:
    """The wall time in `path`, once the test has written it (a write of a few bytes), looked
    for every `poll_s` (without a thread: many handlers wait at once beside the worker's own
    work), or at the test helpers' pace."""
    if poll_s is None:
        released = anyio.Path(path)
        await eventually(released.exists, timeout=RELEASE_WITHIN_S, what=f"{path} written")
        return float(await released.read_text(encoding="utf-8"))
    give_up = time.monotonic() + RELEASE_WITHIN_S
    while (at := _written_time(path)) is None:
        if time.monotonic() > give_up:
            raise AssertionError(f"{path} not written within {RELEASE_WITHIN_S} s")
        await anyio.sleep(poll_s)
    return at


@app.task
async def hog(
    ctx: JobContext, ms: int = 0, block_ms: int = 30, every_ms: int = 100, release: str = ""
) -> None:
    """Block the event loop `block_ms` in every `every_ms` on the first attempt (a handler doing
    some sync work between awaits) for `ms`, or with `release` until the wall time written in
    that file; a cancellation is recorded as `stopped`."""
    record(START, ctx)
    try:
        end: float | None = time.time() + (ms if ctx.attempt == 1 else 0) / 1000
        if release and ctx.attempt == 1:
            end = None
        while end is None or time.time() < end:
            time.sleep(block_ms / 1000)  # noqa: ASYNC251 - blocking the loop is the point
            await anyio.sleep((every_ms - block_ms) / 1000)
            if end is None:
                end = _written_time(Path(release))
    except anyio.get_cancelled_exc_class():
        record(STOPPED, ctx)
        raise
    record(DONE, ctx)


@app.task
async def stall(ctx: JobContext, release: str, block_ms: int, ms: int) -> None:
    """On the first attempt, block the event loop `block_ms` from the wall time written in
    `release` (so a test can make one renewal tick late), then hold `ms`; a cancellation is
    recorded as `stopped`."""
    record(START, ctx)
    try:
        if ctx.attempt == 1:
            await anyio.sleep(max(0.0, await _released_at(Path(release)) - time.time()))
            time.sleep(block_ms / 1000)  # noqa: ASYNC251 - blocking the loop is the point
            await anyio.sleep(ms / 1000)
    except anyio.get_cancelled_exc_class():
        record(STOPPED, ctx)
        raise
    record(DONE, ctx)


UNTIL_CAP_S = 60.0
"""The longest `block_loop` waits for its `until` file past its `ms`."""


@app.task
async def block_loop(ctx: JobContext, ms: int, attempts: int = 1, until: str = "") -> None:
    """Block the event loop itself for `ms` (a handler doing sync I/O in async code), on the
    first `attempts` attempts only, so a re-run can finish; with `until`, go on blocking until
    that file exists (a test's signal that the takeover it waits for has happened)."""
    record(START, ctx)
    if ctx.attempt <= attempts:
        time.sleep(ms / 1000)  # noqa: ASYNC251 - blocking the loop is the point
        if until:
            _block_until(Path(until))
    record(DONE, ctx)


def _block_until(path: Path) -> None:
    """Sleep (blocking the caller's loop) until `path` exists, or UNTIL_CAP_S."""
    capped = time.monotonic() + UNTIL_CAP_S
    while not path.exists() and time.monotonic() < capped:
        time.sleep(0.01)


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
