"""The event loop's lag, measured beside a test: the slack a time bound adds on a busy machine.

A bound on how long something took is the documented promise plus a slack; the slack is not a
guess but what this run saw: the longest a 10 ms sleep of this event loop overran, which counts
both a busy loop and the whole process being descheduled by a loaded machine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

TICK_S = 0.01


class LoopLag:
    """The longest overrun seen so far of a TICK_S sleep."""

    def __init__(self) -> None:
        self.max_s = 0.0

    async def watch(self) -> None:
        while True:
            asked = anyio.current_time()
            await anyio.sleep(TICK_S)
            self.max_s = max(self.max_s, anyio.current_time() - asked - TICK_S)


@asynccontextmanager
async def loop_lag() -> AsyncIterator[LoopLag]:
    """Watch the loop's lag for the body of the `async with`; read `.max_s` after it."""
    lag = LoopLag()
    async with anyio.create_task_group() as group:
        group.start_soon(lag.watch)
        try:
            yield lag
        finally:
            group.cancel_scope.cancel()
