"""The partition registry: how many partitions a logical queue has, and which generations of
partitions are still served (docs/protocol.md, section 2: `{emq}:partitions:<q>`).

The entry is a HASH on the `{emq}` slot: `n` is the current count (producers route new jobs over
its partitions) and each `g<N>` field is a generation still served, valued with the unix ms at
which N was last made current. Setting N writes `n` and `g<N>` in one HSET, so there is no
read-modify-write to race; a generation that is no longer current is retired (`HDEL g<N>`) by a
worker once it has been superseded for RETIRE_AFTER_MS and its partitions hold nothing to run.
Workers always serve the current generation and the plain queue (generation 1), so a job that a
stale or registry-less producer sends to the logical name itself is never stranded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from redis.asyncio import Redis

from emq_worker.protocol.keys import PARTITIONED_KEY, QueueKeys, partitions_key
from emq_worker.protocol.partition_names import (
    partition_names,
    validate_logical_name,
    validate_partition_count,
)
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import server_ms

RETIRE_AFTER_MS = 60_000
"""A superseded generation is retired no sooner than this after the change (producers re-read
the registry every second; this leaves a producer cut off from it a minute to catch up)."""


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One logical queue's partitioning as the registry holds it."""

    queue: str
    n: int
    """The current count: new jobs go to these partitions."""
    generations: Mapping[int, int] = field(default_factory=dict)
    """Every generation still served (the current one included) -> when it was made current
    (unix ms)."""

    @property
    def current(self) -> list[str]:
        return partition_names(self.queue, self.n)

    def retiring(self) -> list[int]:
        """The superseded generations, still served until their partitions are empty."""
        return sorted(count for count in self.generations if count != self.n)

    def served(self) -> list[str]:
        """What a worker given the logical name serves: the current partitions, those of every
        generation not yet retired, and the plain queue (each name once, in that order)."""
        names = [*self.current]
        for count in self.retiring():
            names += partition_names(self.queue, count)
        names.append(self.queue)
        return list(dict.fromkeys(names))

    def superseded_at_ms(self) -> int | None:
        """When the current generation became current (None: unknown, retire nothing)."""
        return self.generations.get(self.n)


def plan_of(queue: str, row: Mapping[bytes | str, bytes | str]) -> PartitionPlan | None:
    """The plan in a registry HASH as read (None: the queue is not partitioned)."""
    fields = {text(name): text(value) for name, value in row.items()}
    if "n" not in fields:
        return None
    generations = {
        int(name[1:]): int(value)
        for name, value in fields.items()
        if name.startswith("g") and name[1:].isdigit()
    }
    return PartitionPlan(queue, int(fields["n"]), generations)


async def read_plan(client: Redis, queue: str) -> PartitionPlan | None:
    return plan_of(queue, await client.hgetall(partitions_key(queue)))


async def read_plans(client: Redis, queues: Sequence[str]) -> dict[str, PartitionPlan]:
    """The plans of those of `queues` that are partitioned: one SMISMEMBER, then one HGETALL
    per partitioned queue (an idle worker on plain queues pays one command per look)."""
    marks = await client.smismember(PARTITIONED_KEY, list(queues))
    plans = {}
    for queue, marked in zip(queues, marks, strict=True):
        plan = await read_plan(client, queue) if marked else None
        if plan is not None:
            plans[queue] = plan
    return plans


async def set_partitions(client: Redis, queue: str, n: int) -> PartitionPlan:
    """Make `n` the current count of `queue` (the older generations keep being served). The
    time of the change is the registry node's clock, as the retire check's."""
    validate_logical_name(queue)
    validate_partition_count(n)
    now_ms = await server_ms(client, PARTITIONED_KEY)
    await client.hset(partitions_key(queue), mapping={"n": n, f"g{n}": now_ms})
    await client.sadd(PARTITIONED_KEY, queue)
    plan = await read_plan(client, queue)
    assert plan is not None  # just written
    return plan


async def retire(client: Redis, queue: str, count: int) -> None:
    await client.hdel(partitions_key(queue), f"g{count}")


async def holds_work(client: Redis, name: str) -> bool:
    """Whether the queue `name` holds a job that will still run: ready, leased, scheduled or
    waiting in a fair lane, a paused one included (a paused lane leaves the ring but keeps its
    jobs). Its dead letters do not keep a partition alive."""
    keys = QueueKeys.of(name)
    async with client.pipeline(transaction=False) as pipe:
        for key in (keys.pending, keys.active, keys.schedule):
            pipe.zcard(key)
        pipe.llen(keys.prefix + "ring")
        pipe.scard(keys.prefix + "paused")
        sizes = await pipe.execute()
    return any(int(size) for size in sizes)


async def retire_drained(
    client: Redis, plan: PartitionPlan, after_ms: int = RETIRE_AFTER_MS
) -> list[int]:
    """Retire every superseded generation of `plan` whose partitions are all empty, once the
    change is `after_ms` old (the registry node's clock); the generations retired."""
    since = plan.superseded_at_ms()
    if since is None or not plan.retiring():
        return []
    if await server_ms(client, PARTITIONED_KEY) - since < after_ms:
        return []
    retired = []
    for count in plan.retiring():
        names = [name for name in partition_names(plan.queue, count) if name != plan.queue]
        if any([await holds_work(client, name) for name in names]):
            continue  # (generation 1, the plain queue, has no names here: served for ever)
        await retire(client, plan.queue, count)
        retired.append(count)
    return retired
