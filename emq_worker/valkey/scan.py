"""A bounded SCAN: operator commands look for keys without ever walking a huge keyspace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis

from emq_worker.valkey.cluster import as_cluster

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
        cluster = as_cluster(self.client)
        # A cluster's keyspace is the union of its primaries': walk each in turn, one budget.
        nodes: list[Any] = [None]
        if cluster is not None:
            await cluster.initialize()  # the slot map (and so the primaries) is read lazily
            nodes = cluster.get_primaries()
        for node in nodes:
            cursor = 0
            while True:
                if self.calls * self.count >= self.budget:
                    return
                options: dict[str, Any] = {} if node is None else {"target_nodes": node}
                cursor, keys = await self.client.scan(
                    cursor, match=self.pattern, count=self.count, **options
                )
                if isinstance(cursor, dict):  # a cluster answers {node name: cursor}
                    cursor = int(next(iter(cursor.values())))
                self.calls += 1
                yield keys
                if cursor == 0:
                    break
        self.complete = True
