"""Where a producer sends a job addressed to a logical queue: the queue itself, or one of its
partitions when the registry says it is partitioned (protocol/partitions.py).

The registry entry is read at most once a second per queue (one HGETALL on the `{emq}` slot) and
cached. A job with a `key` goes to partition crc32(key) mod N, so the jobs of one key share a
partition (and its order); without one, a `dedup_id` or a chosen `job_id` is the key, so an
enqueue sent again meets its first copy's dedup key or id; the rest go round-robin from a random
start. When the registry cannot be read the last plan read stands for up to STALE_S; past that (or
when it never was read, or the ACL refuses the key) jobs go to the logical name itself, which
workers serving the logical queue always serve.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import anyio
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.jobs.options import Placement
from emq_worker.jobs.results import result_key
from emq_worker.protocol.partition_names import key_partition, partition_name
from emq_worker.protocol.partitions import PartitionPlan, read_plan
from emq_worker.protocol.queue import Queue
from emq_worker.valkey.cluster import as_cluster

T = TypeVar("T")

TTL_S = 1.0
"""How long a plan read from the registry is used before it is read again."""
STALE_S = 30.0
"""How long a plan is still used while the registry cannot be read (half of RETIRE_AFTER_MS)."""


def routing_key(placement: Placement) -> str | None:
    """What decides a job's partition: its key, else its dedup id, else its chosen id."""
    for name in ("key", "dedup_id", "job_id"):
        value = placement.get(name)
        if isinstance(value, str):
            return value
    return None


class PartitionRouter:
    def __init__(
        self,
        client: Redis,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._plans: dict[str, tuple[float, PartitionPlan | None]] = {}
        self._turns: dict[str, int] = {}
        self._refused = False

    async def plan(self, queue: str) -> PartitionPlan | None:
        """The plan of `queue` (None: send to the queue itself)."""
        if self._refused:
            return None
        now = self._monotonic()
        cached = self._plans.get(queue)
        if cached is not None and now - cached[0] < TTL_S:
            return cached[1]
        try:
            plan = await read_plan(self.client, queue)
        except NoPermissionError:
            self._refused = True  # an ACL without the {emq} keys: never partitioned for us
            return None
        except (RedisConnectionError, RedisTimeoutError):
            if as_cluster(self.client) is None:
                raise  # one server: the enqueue would wait out the same silence after this one
            return cached[1] if cached is not None and now - cached[0] < STALE_S else None
        self._plans[queue] = (now, plan)
        return plan

    def partition(self, plan: PartitionPlan, placement: Placement) -> str:
        """The partition of `plan` one job goes to."""
        key = routing_key(placement)
        if key is not None:
            index = key_partition(key, plan.n)
        else:
            turn = self._turns.get(plan.queue)
            turn = self._rng.randrange(plan.n) if turn is None else turn + 1
            self._turns[plan.queue] = turn
            index = turn % plan.n
        return partition_name(plan.queue, index, plan.n)

    def split(self, plan: PartitionPlan, placements: Sequence[Placement]) -> dict[str, list[int]]:
        """The jobs of a batch by partition: partition -> the indexes of its jobs, in order."""
        parts: dict[str, list[int]] = {}
        for index, placement in enumerate(placements):
            parts.setdefault(self.partition(plan, placement), []).append(index)
        return parts

    async def holding(self, queue: str, job_id: str, open_queue: Callable[[str], Queue]) -> str:
        """`queue`, or on a partitioned queue the partition that holds the job's row or result
        (one EXISTS per partition served; the logical name itself when none does)."""
        plan = await self.plan(queue)
        if plan is None:
            return queue
        for name in plan.served():
            held = open_queue(name)
            if await self.client.exists(held.keys.job(job_id), result_key(held, job_id)):
                return name
        return queue


async def send_split(
    groups: Mapping[str, list[int]],
    send: Callable[[str, list[int]], Awaitable[Sequence[T]]],
) -> list[T]:
    """Send each partition's share of a batch at once; the replies in the batch's order. The
    first error is raised as it is (a caller sees what a plain queue would raise)."""
    results: dict[int, T] = {}

    async def one(partition: str, indexes: list[int]) -> None:
        replies = await send(partition, indexes)
        results.update(zip(indexes, replies, strict=True))

    try:
        async with anyio.create_task_group() as group:
            for partition, indexes in groups.items():
                group.start_soon(one, partition, indexes)
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [results[index] for index in sorted(results)]
