"""The fair-lanes chaos row: grouped jobs (one deep lane, many small ones, some with a
concurrency limit, some prioritized) under random worker SIGKILLs. Nothing is lost, duplicated or
stale; no lane starves (every lane drains, the small ones well before the deep one); and the
per-group counts end at zero (a killed lease is counted out of its group when reaped, so no lane
stays at its limit forever)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

from emq_worker import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.lane_verbs import limit_lane
from tests.chaos.faults import Fleet, judge, pick
from tests.chaos.ledger import DONE, read_ledger
from tests.chaos.rows import SLACK_S, RowResult, completed_count, stage, stop_gracefully
from tests.support.wait import eventually

DEEP = "deep"
LIMITED_EVERY = 3
"""Every third small group has a concurrency limit of 2."""


@dataclass(frozen=True, slots=True)
class LanesKillSize:
    deep_jobs: int = 3_000
    small_groups: int = 12
    small_jobs: int = 25
    workers: int = 3
    kills: int = 6
    lease_ms: int = 1_000
    beat_ms: int = 200
    job_ms: int = 100
    concurrency: int = 10


def small(i: int) -> str:
    return f"tenant-{i:02d}"


async def enqueue_lanes(client: Redis, queue: str, size: LanesKillSize) -> dict[str, list[str]]:
    """The deep lane first (so it is at the ring's head), then the small ones; every fifth job
    of a lane prioritized ahead of its lane."""
    producer = Producer(client)
    by_group: dict[str, list[str]] = {}
    plan = [(DEEP, size.deep_jobs)] + [
        (small(i), size.small_jobs) for i in range(size.small_groups)
    ]
    for group, count in plan:
        specs = [
            JobSpec("work", {"ms": size.job_ms}, group=group, priority=-1 if n % 5 == 0 else 0)
            for n in range(count)
        ]
        by_group[group] = [str(e.job_id) for e in await producer.enqueue_many(queue, specs)]
    return by_group


async def lanes_left(client: Redis, queue: str, groups: list[str]) -> int:
    """Jobs waiting in lanes, leased or scheduled."""
    keys = QueueKeys.of(queue)
    async with client.pipeline(transaction=False) as pipe:
        for group in groups:
            pipe.zcard(keys.lane(group))
        pipe.zcard(keys.active)
        pipe.zcard(keys.schedule)
        counts = await pipe.execute()
    return int(sum(counts))


def finish_times(directory: Path, by_group: dict[str, list[str]]) -> dict[str, float]:
    """When each lane's last job was done (the ledger's clock, from the first job done)."""
    group_of = {job: group for group, jobs in by_group.items() for job in jobs}
    done = [e for e in read_ledger(directory) if e.kind == DONE and e.job in group_of]
    first = min(e.mono for e in done)
    last: dict[str, float] = {}
    for event in done:
        group = group_of[event.job]
        last[group] = max(last.get(group, 0.0), event.mono - first)
    return last


async def lanes_kill(directory: Path, size: LanesKillSize, seed: int = 7) -> RowResult:
    """SIGKILL a random worker `kills` times over the run, respawning each."""
    rng = random.Random(seed)
    began = time.monotonic()
    queue = "chaos.lanes"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        groups = [DEEP] + [small(i) for i in range(size.small_groups)]
        for i in range(0, size.small_groups, LIMITED_EVERY):
            await limit_lane(Producer(client).queue(queue), small(i), 2)
        by_group = await enqueue_lanes(client, queue, size)
        ids = [job for jobs in by_group.values() for job in jobs]
        await fleet.start(size.workers)
        for k in range(size.kills):
            threshold = len(ids) * (k + 1) // (size.kills + 2)

            async def progressed(at_least: int = threshold) -> bool:
                return await completed_count(client, queue) >= at_least

            await eventually(progressed, timeout=120, what=f"{threshold} jobs completed")
            fleet.kill(pick(rng, fleet.alive))
            for worker in fleet.replace_exited(size.workers):
                await worker.wait_event("worker_started", within_s=60)

        async def drained() -> bool:
            return await lanes_left(client, queue, groups) == 0

        await eventually(drained, timeout=180, what=f"every lane of {queue} drained")
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        keys = QueueKeys.of(queue)
        gactive = await client.hgetall(keys.prefix + "gactive")
        ring = await client.llen(keys.prefix + "ring")
    finished = finish_times(processes.ledger.path.parent, by_group)
    smalls = [finished[g] for g in groups[1:]]
    facts = {
        "gactive_left": len(gactive),
        "ring_left": int(ring),
        "deep_done_s": round(finished[DEEP], 2),
        "last_small_done_s": round(max(smalls), 2),
    }
    bound = (size.lease_ms + size.beat_ms) / 1000 + SLACK_S
    sizes = {
        "deep_jobs": size.deep_jobs,
        "small_groups": size.small_groups,
        "small_jobs": size.small_jobs,
        "workers": size.workers,
        "kills": size.kills,
        "concurrency": size.concurrency,
    }
    return RowResult(
        "lanes, worker SIGKILL", verdict, sizes, time.monotonic() - began, facts, bound
    )
