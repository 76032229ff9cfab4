"""`partitions`: set a logical queue's partition count; show its partitions and their depths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from emq_worker.admin.verbs import COUNT_FIELDS
from emq_worker.protocol.keys import hash_slot
from emq_worker.protocol.partition_names import partition_names, validate_logical_name
from emq_worker.protocol.partitions import PartitionPlan, read_plan, set_partitions
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Counts


@dataclass(frozen=True, slots=True)
class PartitionRow:
    name: str
    generation: int
    current: bool
    slot: int
    counts: Counts

    def as_dict(self) -> dict[str, Any]:
        counts = {name: getattr(self.counts, name) for name in COUNT_FIELDS}
        return {
            "partition": self.name,
            "generation": self.generation,
            "current": self.current,
            "slot": self.slot,
            **counts,
        }


@dataclass(frozen=True, slots=True)
class PartitionView:
    queue: str
    n: int
    """The current count (1 for a queue never partitioned)."""
    rows: list[PartitionRow]

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "partitions": self.n,
            "served": [row.as_dict() for row in self.rows],
        }


async def show_partitions(client: Redis, queue: str) -> PartitionView:
    """Every partition workers serve for `queue`, each generation's, with its depths."""
    validate_logical_name(queue)
    plan = await read_plan(client, queue) or PartitionPlan(queue, 1, {1: 0})
    generations = [plan.n, *plan.retiring()]
    names: dict[str, int] = {}
    for count in [*generations, 1]:  # the plain queue (generation 1) is always served
        for name in partition_names(queue, count):
            names.setdefault(name, count)
    scripts = Scripts()
    rows = [
        PartitionRow(
            name,
            count,
            count == plan.n,
            hash_slot(f"{{{name}}}"),
            await Queue(client, scripts, name).counts(),
        )
        for name, count in names.items()
    ]
    return PartitionView(queue, plan.n, rows)


async def change_partitions(client: Redis, queue: str, n: int) -> PartitionView:
    await set_partitions(client, queue, n)
    return await show_partitions(client, queue)
