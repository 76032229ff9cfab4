"""A bounded SCAN: operator commands look for keys without ever walking a huge keyspace."""

from __future__ import annotations

from collections.abc import AsyncIterator

from redis.asyncio import Redis

SCAN_COUNT = 1000
"""COUNT hint of each SCAN call."""
SCAN_BUDGET = 10_000
"""A scan stops after about this many keys examined (SCAN_BUDGET // SCAN_COUNT calls)."""


class BoundedScan:
    """`async for keys in BoundedScan(client, pattern).pages()`; afterwards `complete` says
    whether the whole keyspace was walked, and `calls` how many SCAN calls it took."""

    def __init__(
        self, client: Redis, pattern: str, *, budget: int = SCAN_BUDGET, count: int = SCAN_COUNT
    ) -> None:
        self.client = client
        self.pattern = pattern
        self.budget = budget
        self.count = count
        self.calls = 0
        self.complete = False

    async def pages(self) -> AsyncIterator[list[bytes | str]]:
        cursor = 0
        while self.calls * self.count < self.budget:
            cursor, keys = await self.client.scan(cursor, match=self.pattern, count=self.count)
            self.calls += 1
            yield keys
            if cursor == 0:
                self.complete = True
                return
