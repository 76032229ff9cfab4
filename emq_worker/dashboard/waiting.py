"""Flow parents waiting for their children (bull-board's waiting-children).

A held parent sits in no set that claims (docs/protocol.md, section 5b); our flow script lists
it in `flow:held` (a ZSET, score 0, so in mint order) until it is released, failed or removed.
A page reads one range of it, then its rows (only those still `awaiting_children` are shown: a
parent EchoMQ's scripts released stays a member) and their `:dependencies` counters: a bounded
read, however big the keyspace.

EchoMQ's producers hold parents without that list. On request (`?scan=1`) a bounded SCAN for
the `:dependencies` counters finds those too (reused for REUSE_S): it walks the keyspace.
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
HELD = "flow:held"


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
    client: Redis,
    finder: ParentFinder,
    queue: str,
    number: int,
    *,
    newest_first: bool,
    scan: bool = False,
) -> Listing:
    """A page of the parents held: from `flow:held`, or with `scan` from the SCAN."""
    keys = QueueKeys.of(queue)
    if scan:
        held, complete = await finder.waiting(queue)
        ordered = held[::-1] if newest_first else held
        page = Page(number, PER_PAGE, len(ordered))
        shown = ordered[page.start : page.stop + 1]
    else:
        complete = True
        page = Page(number, PER_PAGE, int(await client.zcard(keys.prefix + HELD)))
        members = await client.zrange(keys.prefix + HELD, page.start, page.stop, desc=newest_first)
        shown = [text(member) for member in members]
    async with client.pipeline(transaction=False) as pipe:
        queue_time(pipe, keys.pending)
        for job_id in shown:
            pipe.hget(keys.job(job_id), Field.STATE)
            pipe.get(keys.job(job_id) + DEPENDENCIES)
        now, *replies = await pipe.execute()
    states, counts = replies[::2], replies[1::2]
    still = [
        (job_id, int(n or 0))
        for job_id, state, n in zip(shown, states, counts, strict=True)
        if state is not None and text(state) == AWAITING
    ]
    rows = await peek(client, keys, "waiting", [(job_id, 0) for job_id, _ in still])
    counted = [
        dataclasses.replace(row, outstanding=n) for row, (_, n) in zip(rows, still, strict=True)
    ]
    return Listing(queue, "waiting", page, counted, to_ms(now), newest_first, complete=complete)
