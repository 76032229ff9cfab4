"""Who is alive: each worker announces itself, every third of its entry's TTL.

`{emq}:worker:<id>` is a string holding a small JSON description (host, pid, version, queues,
concurrency, busy slots, how many it completed, when it last beat, and per queue where it holds
any the jobs it holds and for how long), with a TTL of a few beats (IDLE_TTL_MS while it holds
nothing: then only its being alive can change): a worker that stops beating disappears by itself,
and one that stops gracefully deletes its entry. `{emq}:workers` indexes them (a ZSET scored by
the worker's last index refresh), so readers never SCAN the keyspace. One command per refresh
whatever the number of queues (a SET: the entry's own PTTL says how fresh it is), four every
INDEX_EVERY_TTLS entry TTLs (the index too): an idle worker's presence used to cost four per queue.

A user whose ACL does not grant the `{emq}:` keys gets NOPERM: the registry then falls back to
one entry per queue (`emq:{q}:worker:<id>`, indexed by `emq:{q}:workers`), which readers still
read (and workers of earlier versions write).
"""

from __future__ import annotations

import heapq
import json
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import NoPermissionError

from emq_worker.protocol import control
from emq_worker.protocol.keys import (
    WORKERS_KEY,
    QueueKeys,
    worker_ask_key,
    worker_entry_key,
)
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.presence_read import HELD_ON
from emq_worker.runtime.presence_read import Entry as Entry
from emq_worker.runtime.presence_read import live_workers as live_workers
from emq_worker.runtime.presence_read import presence_entries as presence_entries

BEATS_TO_LIVE = 3
MIN_TTL_MS = 10_000
"""An entry outlives a few missed beats, and at least this long (the beat may back off)."""
IDLE_TTL_MS = 30_000
"""The entry's TTL while the worker holds nothing: refreshed every third of it, when a park ends
(an idle park lasts at most `idle_park_ms`), so an idle fleet's entries cost a SET per worker every
10-16 s instead of every 3.3 s. What an operator asks is heard at once all the same (the park
watches `ask_key`), and a killed idle worker stays listed up to this long."""
HELD_LISTED = 100
"""Held jobs an entry names (the longest held first); `held_here` counts them all."""
INDEX_PRUNE_TTLS = 10
"""An index member whose worker has not beaten for this many entry TTLs is dropped (by any
worker's beat: generous, as the score is the member's own clock)."""
INDEX_EVERY_TTLS = 6
"""Entry TTLs (the busy one) between two writes of the index: this worker's score, a prune of the
long gone, and its TTL (INDEX_PRUNE_TTLS entry TTLs long). Other refreshes cost a SET alone: a
member is at most INDEX_EVERY_TTLS TTLs and an idle refresh old, well inside the prune's
INDEX_PRUNE_TTLS (which workers of earlier versions apply too)."""
PRUNE_EVERY = 4
"""Index writes between two prunes of the long gone: any worker's prune serves the whole fleet."""


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
    control: str = ""
    """What an operator asked of this worker and it honours (`quiet`, `stop`); "" for nothing."""


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
        self.idle_ttl_ms = max(IDLE_TTL_MS, self.ttl_ms)
        self.written_ttl_ms = self.ttl_ms
        """The TTL the last refresh gave the entry: the next is due within a third of it."""
        self._indexed_at: float | None = None
        self._index_writes = 0
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(2)}"
        self.started = time.time()
        self.version = package_version()
        self.per_queue = False
        """The ACL refused `{emq}:` keys: one entry per queue instead."""

    def keep_busy_ttl(self) -> None:
        """Refresh as often when idle as when busy (a park that cannot watch `ask_key`)."""
        self.idle_ttl_ms = self.ttl_ms

    def ttl_for(self, held: int) -> int:
        """The TTL of an entry saying the worker holds `held` jobs: a busy worker's entry changes
        with every claim; an idle one's says only that it lives (per queue entries are refreshed
        as often as ever: an operator's request has no other way to them)."""
        return self.idle_ttl_ms if held == 0 and not self.per_queue else self.ttl_ms

    @property
    def ask_key(self) -> str:
        """The list an operator's request pushes a token onto, which the park watches."""
        return worker_ask_key(self.id)

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
            "ttl_ms": self.ttl_for(presence.held),
            "held": presence.held,
            "busy": presence.running,
            "completed": presence.completed,
            "started": round(self.started, 3),
            "beat": round(beat, 3),
            **({"control": presence.control} if presence.control else {}),
        }

    async def beat(self, presence: Presence) -> str:
        """Announce this worker: one entry for all its queues (or, when the ACL refuses the
        `{emq}:` keys, one per queue, as workers before 0.x did). Returns what an operator asked
        of it (`quiet`, `stop`, or ""): the entry is written with SET ... GET, and an operator's
        request is an `asked` field written into the entry it replaces (protocol/control.py), so
        hearing it costs no command of its own."""
        beat = time.time()
        shared = self.describe(presence, beat)
        self.written_ttl_ms = ttl_ms = int(shared["ttl_ms"])
        if not self.per_queue:
            held = {
                name: held_on(leases, presence.now)
                for name, leases in presence.leases.items()
                if leases
            }
            entry = _json({**shared, HELD_ON: held})
            try:
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.set(worker_entry_key(self.id), entry, px=ttl_ms, get=True)
                    indexed = self._index(pipe, WORKERS_KEY, int(beat * 1000))
                    replaced = (await pipe.execute())[0]
                self._indexed_at = indexed or self._indexed_at
                return asked_in(replaced)
            except NoPermissionError:
                self.per_queue = True  # an ACL limited to the queues' keys
        return await self._beat_per_queue(presence, shared)

    async def _beat_per_queue(self, presence: Presence, shared: dict[str, Any]) -> str:
        shared = {**shared, "ttl_ms": self.ttl_ms}  # entries an operator can only reach here
        self.written_ttl_ms = self.ttl_ms
        beat_ms = int(float(shared["beat"]) * 1000)
        async with self.client.pipeline(transaction=False) as pipe:
            for name, keys in zip(self.queues, self.keys, strict=True):
                held = held_on(presence.leases.get(name, ()), presence.now)
                entry = _json({**shared, **held})
                pipe.set(worker_key(keys, self.id), entry, px=self.ttl_ms, get=True)
                indexed = self._index(pipe, keys.workers, beat_ms)
            replies = await pipe.execute()
        self._indexed_at = indexed or self._indexed_at
        asks = (asked_in(reply) for reply in replies if isinstance(reply, bytes | str))
        return max(asks, key=control.ASKS_BY_WEIGHT.index, default="")

    def _index(self, pipe: Pipeline, index: str, beat_ms: int) -> float | None:
        """Now and then: score this worker's beat in `index`, drop the long gone and keep the
        index alive. Returns the time it did (monotonic), None when not due."""
        now = time.monotonic()
        every_s = INDEX_EVERY_TTLS * self.ttl_ms / 1000
        if self._indexed_at is not None and now - self._indexed_at < every_s:
            return None
        pipe.zadd(index, {self.id: beat_ms})
        if self._index_writes % PRUNE_EVERY == 0:  # the first included
            pipe.zremrangebyscore(index, "-inf", beat_ms - INDEX_PRUNE_TTLS * self.ttl_ms)
        pipe.pexpire(index, INDEX_PRUNE_TTLS * self.ttl_ms)
        self._index_writes += 1
        return now

    async def asked(self) -> str:
        """What an operator wrote into this worker's entry since its last refresh (one GET; the
        first queue's entry when they are per queue: a request is written into each)."""
        own = worker_key(self.keys[0], self.id) if self.per_queue else worker_entry_key(self.id)
        return asked_in(await self.client.get(own))

    async def leave(self) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            if self.per_queue:
                for keys in self.keys:
                    pipe.delete(worker_key(keys, self.id))
                    pipe.zrem(keys.workers, self.id)
            else:
                pipe.delete(worker_entry_key(self.id), worker_ask_key(self.id))
                pipe.zrem(WORKERS_KEY, self.id)
            await pipe.execute()


def asked_in(replaced: object) -> str:
    """What an operator wrote into the entry a refresh replaced: `quiet`, `stop` or ""."""
    if not isinstance(replaced, bytes | str):
        return ""
    try:
        asked = json.loads(replaced).get(control.ASKED)
    except (ValueError, AttributeError):
        return ""
    return asked if asked in control.ASKS else ""


def held_on(leases: Sequence[Lease], now: float) -> dict[str, Any]:
    """`held_here` and `jobs`: [id, attempt, ms since its claim] of the longest held."""
    listed = heapq.nsmallest(HELD_LISTED, leases, key=lambda lease: lease.claimed_at)
    jobs = [
        [lease.job.id, int(lease.job.token), max(0, int((now - lease.claimed_at) * 1000))]
        for lease in listed
    ]
    return {"held_here": len(leases), "jobs": jobs}


def _json(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"))
