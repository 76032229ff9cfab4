"""Who is alive: each worker announces itself on every queue it serves, once per beat.

`emq:{q}:worker:<id>` is a string holding a small JSON description (host, pid, version, queues,
concurrency, busy slots, the jobs it holds on that queue and for how long, how many it completed,
when it last beat), with a TTL of a few beats: a worker that stops beating disappears by itself,
and one that stops gracefully deletes its entries. `emq:{q}:workers` indexes them (a ZSET scored
by the last beat), so readers never SCAN the keyspace. One pipelined round trip per beat,
whatever the number of queues.
"""

from __future__ import annotations

import heapq
import json
import os
import secrets
import socket
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from redis.asyncio import Redis

from emq_worker.beat.lease import Lease
from emq_worker.protocol.keys import QueueKeys
from emq_worker.server.scan import BoundedScan

BEATS_TO_LIVE = 3
MIN_TTL_MS = 10_000
"""An entry outlives a few missed beats, and at least this long (the beat may back off)."""
HELD_LISTED = 100
"""Held jobs an entry names (the longest held first); `held_here` counts them all."""
INDEX_PRUNE_TTLS = 10
"""An index member whose worker has not beaten for this many entry TTLs is dropped (by any
worker's beat: generous, as the score is the member's own clock)."""
WORKERS_READ = 500
"""Index members a reader looks at per queue (the most recent beats)."""


def worker_key(keys: QueueKeys, worker_id: str) -> str:
    return keys.worker(worker_id)


def package_version() -> str:
    try:
        return metadata.version("emq-worker")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True, slots=True)
class Presence:
    """What a worker says about itself."""

    held: int
    completed: int
    running: int = 0
    """Held jobs whose handler still runs: the busy slots."""
    leases: Mapping[str, Sequence[Lease]] = field(default_factory=dict)
    """The leases held per queue."""
    now: float = 0.0
    """The monotonic time the leases' `claimed_at` is compared with."""


class WorkerRegistry:
    def __init__(
        self,
        client: Redis,
        queues: Sequence[str],
        concurrency: int,
        beat_ms: int,
        lease_ms: int = 0,
    ) -> None:
        self.client = client
        self.queues = list(queues)
        self.keys = [QueueKeys.of(name) for name in queues]
        self.concurrency = concurrency
        self.beat_ms = beat_ms
        self.lease_ms = lease_ms
        self.ttl_ms = max(BEATS_TO_LIVE * beat_ms, MIN_TTL_MS)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(2)}"
        self.started = time.time()
        self.version = package_version()

    def describe(self, presence: Presence, beat: float) -> dict[str, Any]:
        """The fields every queue's entry shares."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "queues": self.queues,
            "concurrency": self.concurrency,
            "lease_ms": self.lease_ms,
            "beat_ms": self.beat_ms,
            "ttl_ms": self.ttl_ms,
            "held": presence.held,
            "busy": presence.running,
            "completed": presence.completed,
            "started": round(self.started, 3),
            "beat": round(beat, 3),
        }

    async def beat(self, presence: Presence, serving: Collection[str] | None = None) -> None:
        """Announce this worker on every queue, or on those in `serving` (the queues not
        resting after a failure: on a cluster, one whose node is lost would fail the call)."""
        beat = time.time()
        shared = self.describe(presence, beat)
        beat_ms = int(beat * 1000)
        async with self.client.pipeline(transaction=False) as pipe:
            for name, keys in zip(self.queues, self.keys, strict=True):
                if serving is not None and name not in serving:
                    continue
                entry = json.dumps(
                    {**shared, **held_on(presence.leases.get(name, ()), presence.now)},
                    separators=(",", ":"),
                )
                pipe.set(worker_key(keys, self.id), entry, px=self.ttl_ms)
                pipe.zadd(keys.workers, {self.id: beat_ms})
                pipe.zremrangebyscore(
                    keys.workers, "-inf", beat_ms - INDEX_PRUNE_TTLS * self.ttl_ms
                )
                pipe.pexpire(keys.workers, INDEX_PRUNE_TTLS * self.ttl_ms)
            await pipe.execute()

    async def leave(self) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for keys in self.keys:
                pipe.delete(worker_key(keys, self.id))
                pipe.zrem(keys.workers, self.id)
            await pipe.execute()


def held_on(leases: Sequence[Lease], now: float) -> dict[str, Any]:
    """`held_here` and `jobs`: [id, attempt, ms since its claim] of the longest held."""
    listed = heapq.nsmallest(HELD_LISTED, leases, key=lambda lease: lease.claimed_at)
    jobs = [
        [lease.job.id, int(lease.job.token), max(0, int((now - lease.claimed_at) * 1000))]
        for lease in listed
    ]
    return {"held_here": len(leases), "jobs": jobs}


@dataclass(frozen=True, slots=True)
class Entry:
    """A live worker's entry on one queue, and how long ago (ms) it was written."""

    queue: str
    fields: dict[str, Any]
    age_ms: int


async def presence_entries(client: Redis, queues: Sequence[str]) -> list[Entry]:
    """The live entries of every worker on `queues`: from each queue's index, or, for a queue
    without one (workers older than the index), from a bounded SCAN. Two round trips."""
    keys = [QueueKeys.of(name) for name in queues]
    async with client.pipeline(transaction=False) as pipe:
        for k in keys:
            pipe.zrange(k.workers, 0, WORKERS_READ - 1, desc=True)
        indexes = await pipe.execute()
    names: list[tuple[str, str]] = []
    for name, k, members in zip(queues, keys, indexes, strict=True):
        found = [_text(m) for m in members] if members else await _scanned(client, k)
        names += [(name, worker_key(k, worker_id)) for worker_id in found]
    async with client.pipeline(transaction=False) as pipe:
        for _, key in names:
            pipe.get(key)
            pipe.pttl(key)
        replies = await pipe.execute()
    entries = []
    for (name, _), value, ttl in zip(names, replies[::2], replies[1::2], strict=True):
        fields = _decoded(value)
        if fields is not None:
            ttl_ms = int(str(fields.get("ttl_ms", 0)) or 0)
            age = max(0, ttl_ms - int(ttl)) if ttl_ms and int(ttl) >= 0 else 0
            entries.append(Entry(name, fields, age))
    return entries


async def _scanned(client: Redis, keys: QueueKeys) -> list[str]:
    found: list[str] = []
    async for page in BoundedScan(client, worker_key(keys, "*")).pages():
        found += [_text(key)[len(worker_key(keys, "")) :] for key in page]
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decoded(value: bytes | str | None) -> dict[str, Any] | None:
    if value is None:
        return None  # expired between the index and the read
    try:
        fields = json.loads(value)
    except ValueError:
        return None  # not one of ours
    return fields if isinstance(fields, dict) else None


async def live_workers(client: Redis, queue: str) -> list[dict[str, object]]:
    """Every worker whose entry on `queue` has not expired, oldest first."""
    workers = [entry.fields for entry in await presence_entries(client, [queue])]
    return sorted(workers, key=lambda w: float(str(w.get("started", 0))))
