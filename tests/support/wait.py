"""Poll-with-deadline helpers: tests wait for a condition, never for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")
POLL_S = 0.01


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    timeout: float = 10.0,
    what: str = "condition",
) -> T:
    """Await `probe()` until it returns a truthy value; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last {value!r}")
        await anyio.sleep(POLL_S)


def eventually_sync(probe: Callable[[], T], *, timeout: float = 10.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last {value!r}")
        time.sleep(POLL_S)


async def until(predicate: Callable[[], bool], *, what: str, within: float = 10.0) -> None:
    """`eventually` for a plain in-process condition."""

    async def probe() -> bool:
        return predicate()

    await eventually(probe, timeout=within, what=what)
