"""Flow parents waiting for their children (bull-board's waiting-children).

A held parent sits in no set (docs/protocol.md, section 5b): what marks it is its
`job:<id>:dependencies` counter. A bounded SCAN for those keys finds the parents, whose rows
still say `awaiting_children`; the list is reused for REUSE_S, so a page refreshed every
second does not walk the keyspace every second. Ids sort in mint order.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from redis.asyncio import Redis

from emq_worker.dashboard.job_search import LOOKUP_BUDGET, LOOKUP_COUNT
from emq_worker.dashboard.listing import PER_PAGE, Listing, peek
from emq_worker.dashboard.queues import Page
from emq_worker.protocol import ids
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import Field
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import queue_time, to_ms
from emq_worker.valkey.scan import BoundedScan

REUSE_S = 5.0
DEPENDENCIES = ":dependencies"
AWAITING = "awaiting_children"


class ParentFinder:
    """Per queue, the parents still waiting (and whether the SCAN walked the whole keyspace)."""

    def __init__(self, client: Redis, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._found: dict[str, tuple[float, list[str], bool]] = {}

    async def waiting(self, queue: str) -> tuple[list[str], bool]:
        now = self.clock()
        cached = self._found.get(queue)
        if cached is None or now - cached[0] > REUSE_S:
            cached = (now, *await self._scan(QueueKeys.of(queue)))
            self._found[queue] = cached
        return cached[1], cached[2]

    async def _scan(self, keys: QueueKeys) -> tuple[list[str], bool]:
        prefix = f"{keys.prefix}job:"
        scan = BoundedScan(
            self.client, f"{prefix}*{DEPENDENCIES}", budget=LOOKUP_BUDGET, count=LOOKUP_COUNT
        )
        found: set[str] = set()
        async for page in scan.pages():
            found.update(text(key)[len(prefix) : -len(DEPENDENCIES)] for key in page)
        candidates = sorted(job_id for job_id in found if ids.is_valid(job_id))
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id in candidates:
                pipe.hget(keys.job(job_id), Field.STATE)
            states = await pipe.execute()
        held = [j for j, s in zip(candidates, states, strict=True) if s and text(s) == AWAITING]
        return held, scan.complete


async def list_waiting(
    client: Redis, finder: ParentFinder, queue: str, number: int, *, newest_first: bool
) -> Listing:
    keys = QueueKeys.of(queue)
    held, complete = await finder.waiting(queue)
    ordered = held[::-1] if newest_first else held
    page = Page(number, PER_PAGE, len(ordered))
    shown = ordered[page.start : page.stop + 1]
    async with client.pipeline(transaction=False) as pipe:
        queue_time(pipe, keys.pending)
        for job_id in shown:
            pipe.get(keys.job(job_id) + DEPENDENCIES)
        now, *counts = await pipe.execute()
    rows = await peek(client, keys, "waiting", [(job_id, 0) for job_id in shown])
    counted = [
        dataclasses.replace(row, outstanding=int(n or 0))
        for row, n in zip(rows, counts, strict=True)
    ]
    return Listing(queue, "waiting", page, counted, to_ms(now), newest_first, complete=complete)
