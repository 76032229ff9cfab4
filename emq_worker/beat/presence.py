"""Who is alive: each worker announces itself on every queue it serves, once per beat.

`emq:{q}:worker:<id>` is a string holding a small JSON description (host, pid, queues,
concurrency, what it holds, how many it completed, when it last beat), with a TTL of a few beats:
a worker that stops beating disappears by itself, and one that stops gracefully deletes its
entries. One pipelined round trip per beat, whatever the number of queues.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from emq_worker.protocol.keys import QueueKeys
from emq_worker.server.scan import BoundedScan

BEATS_TO_LIVE = 3
MIN_TTL_MS = 10_000
"""An entry outlives a few missed beats, and at least this long (the beat may back off)."""


def worker_key(keys: QueueKeys, worker_id: str) -> str:
    return f"{keys.prefix}worker:{worker_id}"


@dataclass(frozen=True, slots=True)
class Presence:
    """What a worker says about itself."""

    held: int
    completed: int


class WorkerRegistry:
    def __init__(
        self, client: Redis, queues: Sequence[str], concurrency: int, beat_ms: int
    ) -> None:
        self.client = client
        self.queues = list(queues)
        self.keys = [QueueKeys.of(name) for name in queues]
        self.concurrency = concurrency
        self.ttl_ms = max(BEATS_TO_LIVE * beat_ms, MIN_TTL_MS)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(2)}"
        self.started = time.time()

    async def beat(self, presence: Presence, serving: Collection[str] | None = None) -> None:
        """Announce this worker on every queue, or on those in `serving` (the queues not
        resting after a failure: on a cluster, one whose node is lost would fail the call)."""
        entry = json.dumps(
            {
                "id": self.id,
                "host": self.host,
                "pid": self.pid,
                "queues": self.queues,
                "concurrency": self.concurrency,
                "held": presence.held,
                "completed": presence.completed,
                "started": round(self.started, 3),
                "beat": round(time.time(), 3),
            },
            separators=(",", ":"),
        )
        async with self.client.pipeline(transaction=False) as pipe:
            for name, keys in zip(self.queues, self.keys, strict=True):
                if serving is not None and name not in serving:
                    continue
                pipe.set(worker_key(keys, self.id), entry, px=self.ttl_ms)
            await pipe.execute()

    async def leave(self) -> None:
        await self.client.delete(*(worker_key(keys, self.id) for keys in self.keys))


async def live_workers(client: Redis, queue: str) -> list[dict[str, object]]:
    """Every worker whose entry on `queue` has not expired, oldest first (a bounded SCAN)."""
    pattern = worker_key(QueueKeys.of(queue), "*")
    keys: list[bytes | str] = []
    async for page in BoundedScan(client, pattern).pages():
        keys += page
    entries = await client.mget(keys) if keys else []
    workers = []
    for entry in entries:
        if entry is None:
            continue  # expired between the scan and the read
        try:
            workers.append(json.loads(entry))
        except ValueError:
            continue  # not one of ours
    return sorted(workers, key=lambda w: float(str(w.get("started", 0))))
