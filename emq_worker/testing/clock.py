"""Fast-forward on the server clock: make scheduled jobs (delays, retry backoffs) and repeats due
now, without waiting for them and without touching the clocks the worker reads."""

from __future__ import annotations

import math
from typing import cast

from emq_worker.jobs.repeat import RepeatFirer
from emq_worker.protocol.ids import DEFAULT_NODE_ID, SnowflakeMinter
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.servertime import server_ms

PROMOTE_BATCH = 1_000


async def fast_forward(queue: Queue) -> int:
    """Make every job in `emq:{q}:schedule` due now (its score set to the server's now), then
    promote them to pending as a worker's beat would (the `promote` script, which wakes parked
    workers). Returns how many were promoted."""
    keys = queue.keys
    members = cast(list[bytes], await queue.client.zrange(keys.schedule, 0, -1))
    if not members:
        return 0
    now = await server_ms(queue.client, keys.schedule)
    # XX: a member a worker promoted meanwhile is not put back.
    await queue.client.zadd(keys.schedule, {member: now for member in members}, xx=True)
    promoted = 0
    while True:
        result = await queue.promote(PROMOTE_BATCH)
        promoted += result.promoted
        if not result.more:
            return promoted


async def fire_repeats(queue: Queue, *, node_id: int = DEFAULT_NODE_ID) -> int:
    """Mint one occurrence of every (unpaused) repeat on the queue now: their due time set to
    the server's now, then the beat's own minting (`RepeatFirer`), whose compare-and-set keeps
    a worker firing at the same moment from minting it twice. Returns how many were due."""
    keys = queue.keys
    repeats = f"{keys.prefix}repeat"
    scored = cast(
        list[tuple[bytes, float]], await queue.client.zrange(repeats, 0, -1, withscores=True)
    )
    due = [name for name, score in scored if not math.isinf(score)]  # +inf: paused
    if not due:
        return 0
    now = await server_ms(queue.client, repeats)
    await queue.client.zadd(repeats, {name: now for name in due}, xx=True)
    await RepeatFirer(SnowflakeMinter(node_id)).fire(queue)
    return len(due)
