"""The pending tab with the jobs waiting in fair lanes: a job enqueued with a group waits in its
lane (`g:<group>:pending`), not in `pending`, yet it is pending all the same. The tab pages
through `pending`, then each lane the `lanes` script reports (the deepest LANES_LISTED, deepest
first), as one list: a page reads only the sets and ranges it covers."""

from __future__ import annotations

import dataclasses

from emq_worker.dashboard.listing import PER_PAGE, Listing, list_jobs, peek
from emq_worker.dashboard.queues import Page
from emq_worker.protocol.lane_verbs import read_lanes
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import queue_time, to_ms

LANES_LISTED = 1000
"""Lanes whose jobs the pending tab lists at most (the deepest; the lanes tab names them)."""


async def pending_with_lanes(queue: Queue, number: int, *, newest_first: bool) -> Listing:
    lanes = await read_lanes(queue, top=LANES_LISTED)
    if not lanes.waiting:
        return await list_jobs(
            queue.client, queue.name, "pending", number, newest_first=newest_first
        )
    keys = queue.keys
    async with queue.client.pipeline(transaction=False) as pipe:
        queue_time(pipe, keys.pending)
        pipe.zcard(keys.pending)
        now, flat = await pipe.execute()
    segments: list[tuple[str, int, str | None]] = [(keys.pending, int(flat), None)]
    segments += [(keys.lane(lane.group), lane.waiting, lane.group) for lane in lanes.deepest]
    if newest_first:
        segments.reverse()
    page = Page(number, PER_PAGE, sum(size for _, size, _ in segments))
    scored: list[tuple[str, int]] = []
    groups: list[str | None] = []
    offset = 0
    for key, size, group in segments:
        low, high = max(page.start - offset, 0), min(page.stop - offset, size - 1)
        if low <= high:
            members = await queue.client.zrange(key, low, high, desc=newest_first, withscores=True)
            scored += [(text(pair[0]), int(pair[1])) for pair in members]
            groups += [group] * len(members)
        offset += size
        if offset > page.stop:
            break
    rows = await peek(queue.client, keys, "pending", scored)
    grouped = [dataclasses.replace(row, group=g) for row, g in zip(rows, groups, strict=True)]
    listed_all = lanes.complete and lanes.groups <= LANES_LISTED
    return Listing(
        queue.name, "pending", page, grouped, to_ms(now), newest_first, complete=listed_all
    )
