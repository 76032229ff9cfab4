"""Reading the history the workers flush (format: observe/history_format.py): series for the graphs,
sparklines for the overview, and per-task tables. Every read names its buckets from the server
clock and fetches them in one pipeline; a missing bucket is a quiet minute."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from emq_worker.errors import ConfigError
from emq_worker.observe.history_format import (
    HOUR_MS,
    MINUTE_MS,
    Stats,
    bucket_starts,
    parse_bucket,
    total,
)
from emq_worker.protocol.keys import QUEUES_KEY, QueueKeys
from emq_worker.protocol.servertime import server_ms


@dataclass(frozen=True, slots=True)
class Range:
    width_ms: int
    buckets: int
    per_point: int
    """Buckets added up into one point of a graph."""


RANGES = {
    "1h": Range(MINUTE_MS, 60, 1),
    "6h": Range(MINUTE_MS, 360, 5),
    "24h": Range(MINUTE_MS, 1440, 15),
    "7d": Range(HOUR_MS, 168, 2),
    "14d": Range(HOUR_MS, 336, 4),
}
TASK_RANGES = {"24h": 24, "7d": 168, "14d": 336}
"""The per-task fields live in the hour buckets only."""
SPARK_MINUTES = 60


def range_named(name: str, choices: Sequence[str] = tuple(RANGES)) -> str:
    if name not in choices:
        raise ConfigError(f"range must be one of {', '.join(choices)}; got {name!r}")
    return name


def _key(keys: QueueKeys, width_ms: int, start: int) -> str:
    return keys.history_minute(start) if width_ms == MINUTE_MS else keys.history_hour(start)


async def _now(client: Redis) -> int:
    return await server_ms(client, QUEUES_KEY)


@dataclass(frozen=True, slots=True)
class Series:
    now_ms: int
    step_ms: int
    points: list[tuple[int, Stats]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "now_ms": self.now_ms,
            "step_ms": self.step_ms,
            "points": [{"t": start, **stats.as_dict()} for start, stats in self.points],
            "total": total(stats for _, stats in self.points).as_dict(),
        }


async def series(client: Redis, queues: Sequence[str], range_name: str) -> Series:
    """The queues' history summed, one point per `per_point` buckets, oldest first."""
    chosen = RANGES[range_named(range_name)]
    now = await _now(client)
    starts = bucket_starts(now, chosen.width_ms, chosen.buckets)
    async with client.pipeline(transaction=False) as pipe:
        for name in queues:
            keys = QueueKeys.of(name)
            for start in starts:
                pipe.hgetall(_key(keys, chosen.width_ms, start))
        replies = await pipe.execute()
    sums = [Stats() for _ in starts]
    for n, raw in enumerate(replies):
        if raw:
            sums[n % len(starts)].add(parse_bucket(raw)[0])
    points = [
        (starts[i], total(sums[i : i + chosen.per_point]))
        for i in range(0, len(starts), chosen.per_point)
    ]
    return Series(now, chosen.width_ms * chosen.per_point, points)


async def sparks(client: Redis, queues: Sequence[str]) -> dict[str, Any]:
    """Per queue, completed and failed (retried + dead) per minute over the last hour."""
    now = await _now(client)
    starts = bucket_starts(now, MINUTE_MS, SPARK_MINUTES)
    async with client.pipeline(transaction=False) as pipe:
        for name in queues:
            keys = QueueKeys.of(name)
            for start in starts:
                pipe.hmget(keys.history_minute(start), "completed", "retried", "dead")
        replies = await pipe.execute()
    out: dict[str, Any] = {}
    for n, name in enumerate(queues):
        rows = replies[n * len(starts) : (n + 1) * len(starts)]
        out[name] = [
            [int(done or 0), int(retried or 0) + int(dead or 0)] for done, retried, dead in rows
        ]
    return {"now_ms": now, "step_ms": MINUTE_MS, "first_ms": starts[0], "queues": out}


@dataclass(frozen=True, slots=True)
class TaskRow:
    queue: str
    task: str
    stats: Stats
    errors: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "task": self.task,
            **self.stats.as_dict(),
            "errors": self.errors,
        }


async def task_rows(client: Redis, queues: Sequence[str], range_name: str) -> list[TaskRow]:
    """Per (queue, task): the counts, failure rate and run times over the range (hour buckets),
    busiest first; the recent errors are added by the caller (tasks_errors)."""
    hours = TASK_RANGES[range_named(range_name, tuple(TASK_RANGES))]
    now = await _now(client)
    starts = bucket_starts(now, HOUR_MS, hours + 1)  # the current hour is partial
    async with client.pipeline(transaction=False) as pipe:
        for name in queues:
            keys = QueueKeys.of(name)
            for start in starts:
                pipe.hgetall(keys.history_hour(start))
        replies = await pipe.execute()
    found: dict[tuple[str, str], Stats] = {}
    for n, raw in enumerate(replies):
        if not raw:
            continue
        queue = queues[n // len(starts)]
        for task, stats in parse_bucket(raw)[1].items():
            found.setdefault((queue, task), Stats()).add(stats)
    rows = [TaskRow(queue, task, stats, []) for (queue, task), stats in found.items()]
    return sorted(rows, key=lambda row: (-row.stats.settled, row.queue, row.task))
