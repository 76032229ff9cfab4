"""Helpers for server-fault tests: count what clients sent (INFO commandstats), fill memory up to
maxmemory, and read a queue's invariants straight from Redis."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis
from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError

from emq_worker.protocol.keys import QueueKeys

FILLER = "test:filler:"
FILL_MAX_WRITES = 64
PIN_BELOW = 256 * 1024
WORKER_REQUESTS = frozenset({"evalsha", "blpop"})
"""What a worker sends per beat at the top level: script calls and parks. (INFO commandstats also
counts the commands scripts run inside, so those are left out of a request rate.)"""


async def command(client: Redis, *args: str | int | float) -> Any:
    """Any server command (DEBUG, CLIENT PAUSE, REPLICAOF, ACL ...), typed."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def admin_command(client: redis.Redis, *args: str | int | float) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


async def command_calls(client: Redis) -> Counter[str]:
    """Calls per command since the server started (or since CONFIG RESETSTAT)."""
    stats = await client.info("commandstats")
    calls: Counter[str] = Counter()
    for name, fields in stats.items():
        if isinstance(fields, dict):
            calls[str(name).removeprefix("cmdstat_")] = int(fields.get("calls", 0))
    return calls


def worker_requests(calls: Counter[str]) -> int:
    return sum(calls[name] for name in WORKER_REQUESTS)


async def used_memory(client: Redis) -> int:
    memory = await client.info("memory")
    return int(memory["used_memory"])


async def exhaust_memory(client: Redis, headroom: int = 64 * 1024) -> None:
    """maxmemory just above what is used now (noeviction), then writes until one is refused:
    from here on every write that may grow memory is refused with OOM."""
    await client.config_set("maxmemory-policy", "noeviction")
    await client.config_set("maxmemory", await used_memory(client) + headroom)
    for n in range(FILL_MAX_WRITES):
        try:
            await client.set(f"{FILLER}{n}", b"x" * (headroom // 4))
        except OutOfMemoryError:
            # At the edge, a command's own buffers decide; pin the limit below what is used now
            # (by more than client buffers shrink), so every write that may grow memory is
            # refused until free_memory.
            await client.config_set("maxmemory", await used_memory(client) - PIN_BELOW)
            return
    raise AssertionError(f"{FILL_MAX_WRITES} writes did not reach maxmemory")


async def free_memory(client: Redis) -> None:
    await client.config_set("maxmemory", 0)
    await client.delete(*[f"{FILLER}{n}" for n in range(FILL_MAX_WRITES)])


@dataclass(frozen=True, slots=True)
class QueueState:
    pending: int
    active: int
    scheduled: int
    dead: int
    locks: int
    attempts: dict[str, int]


async def queue_state(client: Redis, queue: str, ids: list[str]) -> QueueState:
    keys = QueueKeys.of(queue)
    async with client.pipeline(transaction=False) as pipe:
        for key in (keys.pending, keys.active, keys.schedule, keys.dead):
            pipe.zcard(key)
        for job in ids:
            pipe.hget(keys.job(job), "attempts")
            pipe.exists(f"{keys.job(job)}:lock")
        replies = await pipe.execute()
    pending, active, scheduled, dead = (int(n) for n in replies[:4])
    rest = replies[4:]
    attempts = {job: int(rest[2 * i] or 0) for i, job in enumerate(ids)}
    locks = sum(int(flag) for flag in rest[1::2])
    return QueueState(pending, active, scheduled, dead, locks, attempts)
