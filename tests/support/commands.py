"""Counting what a server is asked: INFO commandstats over a window, and waiting for a park."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
from redis.asyncio import Redis

from tests.support.wait import eventually

OBSERVER_COMMANDS = frozenset({"info", "config|resetstat", "client|list", "config", "client"})
"""What the counting itself sends: left out of the counts."""


async def commands_in(client: Redis, window_s: float) -> Counter[str]:
    """The calls of each command (those run inside scripts included) over the next `window_s`
    seconds: the window IS the measurement."""
    await client.config_resetstat()
    await anyio.sleep(window_s)
    stats: dict[str, Any] = await client.info("commandstats")
    counts: Counter[str] = Counter()
    for name, fields in stats.items():
        command = name.removeprefix("cmdstat_")
        if command not in OBSERVER_COMMANDS:
            counts[command] = int(fields["calls"])
    return counts


async def parked(client: Redis, workers: int = 1) -> None:
    """Until `workers` clients sit blocked in a BLPOP: the workers are parked."""

    async def blocked() -> bool:
        listing = await client.client_list()
        return sum(entry.get("cmd") == "blpop" for entry in listing) >= workers

    await eventually(blocked, timeout=30, what=f"{workers} workers parked in BLPOP")
