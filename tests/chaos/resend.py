"""The re-sent enqueue row: a producer's enqueue bursts lose their replies on the way back (a proxy
forwards the call, drops the reply and closes the connection), so the very same call is sent
again: by the Producer itself (the product's single-server client), or by the client library
(a redis-py Retry, as the cluster client re-sends after a MOVED re-map or CLUSTERDOWN), while a
worker completes the jobs, often before the re-send arrives (hand-offs start a job within a
millisecond). Every burst of caller-chosen ids is also re-sent by the application itself once
acknowledged, as the README advises after a lost reply.

The verdict counts `metrics:completed` against the distinct acknowledged jobs: a re-send that
minted anew, or re-created a completed job, shows as a duplicated (or unexpected) job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis
from redis.asyncio.retry import Retry

from emq_worker import JobSpec, Producer
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import connect
from tests.chaos.checker import Fault
from tests.chaos.faults import Fleet, judge, wait_drained
from tests.chaos.proxy import Proxy
from tests.chaos.rows import (
    TEST_BACKOFF,
    RowResult,
    _sizes,
    script_call_of,
    stage,
    stop_gracefully,
)

CHOSEN_NODE_ID = 901
"""Node id of the ids the application chooses itself (the producer mints from 1000)."""


@dataclass(frozen=True, slots=True)
class ResendSize:
    bursts: int = 200
    burst: int = 25
    """Jobs per enqueue call (one script call each)."""
    chosen_every: int = 3
    """Every `chosen_every`-th burst carries caller-chosen ids (and is re-sent by the app)."""
    replies_to_lose: int = 100
    lose_rate: float = 0.5
    """The chance that an enqueue call (a re-sent one too) loses its reply, until the budget
    is spent."""
    library_resends: bool = False
    """Re-sent by redis-py (a Retry on the client) rather than by the Producer."""
    workers: int = 1
    concurrency: int = 10
    lease_ms: int = 2_000
    beat_ms: int = 200
    job_ms: int = 1


async def _bursts(producer: Producer, queue: str, size: ResendSize) -> tuple[list[str], int]:
    """Every burst through the lossy proxy; the distinct acknowledged ids, and how many jobs
    the application's own re-sends reported as enqueued (each one a job run twice)."""
    minter = SnowflakeMinter(CHOSEN_NODE_ID)
    acknowledged: dict[str, None] = {}
    enqueued_again = 0
    for b in range(size.bursts):
        chosen = b % size.chosen_every == 0
        specs = [
            JobSpec("work", {"ms": size.job_ms}, job_id=minter.job_id() if chosen else None)
            for _ in range(size.burst)
        ]
        for result in await producer.enqueue_many(queue, specs):
            acknowledged[str(result.job_id)] = None
        if chosen:
            again = await producer.enqueue_many(queue, specs)
            enqueued_again += sum(not result.duplicate for result in again)
    return list(acknowledged), enqueued_again


async def lost_enqueue_replies(directory: Path, size: ResendSize) -> RowResult:
    began = time.monotonic()
    queue = "chaos.resend"
    async with stage(directory) as (server, client, processes), Proxy(server.port) as proxy:
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        await fleet.start(size.workers)
        retry = Retry(TEST_BACKOFF, 20) if size.library_resends else None
        lossy: Redis = connect(proxy.url, DEFAULT_WIRE_VERSION, retry=retry)
        try:
            # Each call loses at most its first reply: the re-send is what is under test, and
            # the Producer gives up after a few lost in a row (raising, as it must).
            calls = script_call_of("enqueue")
            proxy.lose_replies(calls, size.replies_to_lose, size.lose_rate, again=False)
            ids, enqueued_again = await _bursts(Producer(lossy), queue, size)
        finally:
            await lossy.aclose()
        await wait_drained(client, queue, within_s=60)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        completed = int(await client.hget(f"emq:{{{queue}}}:metrics:completed", "count") or 0)
    facts = {
        "replies_lost": proxy.replies_lost,
        "acknowledged": len(ids),
        "completed": completed,
        "app_resends_enqueued": enqueued_again,
    }
    fleet.faults.extend(Fault("lost enqueue reply", began) for _ in range(proxy.replies_lost))
    verdict.faults = proxy.replies_lost
    row = "lost enqueue replies" + (", redis-py re-sends" if size.library_resends else "")
    return RowResult(row, verdict, _sizes(size), time.monotonic() - began, facts)
