"""Finding a job by its id alone, in whichever queue holds it.

First the queues the dashboard knows (`{emq}:queues` and its SCAN, reused for a few seconds):
one pipeline asks each for the job's row, its settle receipt and its stored result. Only when
none has it does a bounded SCAN look for the id's own keys (`emq:{*}:*:<id>`): a queue that
only EchoMQ's producers write to is in no list, and the queue SCAN may have stopped at its
budget before it. A queue found that way is remembered, so the overview lists it from then on.
"""

from __future__ import annotations

from typing import NamedTuple

from redis.asyncio import Redis

from emq_worker.admin import verbs
from emq_worker.dashboard.job_result import result_key
from emq_worker.dashboard.queues import QueueFinder
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import JobId
from emq_worker.valkey.scan import BoundedScan

LOOKUP_COUNT = 10_000
"""COUNT of each SCAN call of the look-up (its MATCH names one id: few keys come back)."""
LOOKUP_BUDGET = 2_000_000
"""Keys the look-up examines at most (about 200 calls; 100 000 keys take about 10)."""


class Located(NamedTuple):
    """The queues that hold the job (a row, a receipt or a result), how many queues were
    asked, and whether the look-up SCAN walked the whole keyspace (False: it stopped at its
    budget, and the id may be in a queue not seen)."""

    queues: list[str]
    searched: int
    complete: bool


async def holding(client: Redis, names: list[str], job_id: JobId) -> list[str]:
    """Those of `names` that hold `job_id`: its row, its receipt or its result (one pipeline)."""
    if not names:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for name in names:
            keys = QueueKeys.of(name)
            pipe.exists(keys.job(job_id), result_key(keys, job_id))
            pipe.hexists(*keys.receipt(job_id))
        replies = await pipe.execute()
    hits = [row or receipt for row, receipt in zip(replies[::2], replies[1::2], strict=True)]
    return [name for name, hit in zip(names, hits, strict=True) if hit]


async def locate(client: Redis, finder: QueueFinder, job_id: JobId) -> Located:
    known = (await finder.find()).queues
    found = await holding(client, known, job_id)
    if found:
        return Located(found, len(known), True)
    scan = BoundedScan(client, f"emq:{{*}}:*:{job_id}", budget=LOOKUP_BUDGET, count=LOOKUP_COUNT)
    seen: set[str] = set()
    async for keys in scan.pages():
        seen.update(q for q in map(verbs.queue_of_key, keys) if q is not None)
    found = await holding(client, sorted(seen - set(known)), job_id)
    finder.remember(found)
    return Located(found, len(known) + len(found), scan.complete)
