"""Reading who is alive (runtime/presence.py writes it): for each queue asked about, the live
workers that serve it, with what each holds there.

A worker's entry is `{emq}:worker:<id>`, one for all its queues, indexed by `{emq}:workers`.
Entries per queue (`emq:{q}:worker:<id>`, indexed by `emq:{q}:workers`) are read too: workers of
earlier versions, and those whose ACL refuses the `{emq}:` keys, write those. A queue that no
index names a worker on is looked for with a bounded SCAN (workers older than the indexes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from emq_worker.protocol.keys import WORKERS_KEY, QueueKeys, worker_entry_key
from emq_worker.valkey.scan import BoundedScan

WORKERS_READ = 500
"""Index members a reader looks at per index (the most recent beats)."""
HELD_ON = "held_on"
"""The field of a worker's entry naming, per queue where it holds jobs, `held_here` and `jobs`."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A live worker's entry on one queue, and how long ago (ms) it was written."""

    queue: str
    fields: dict[str, Any]
    age_ms: int


async def presence_entries(client: Redis, queues: Sequence[str]) -> list[Entry]:
    """The live entries of every worker on `queues`: the workers' own entries, then the entries
    per queue, each worker once per queue. Three round trips (more for a SCAN)."""
    keys = [QueueKeys.of(name) for name in queues]
    async with client.pipeline(transaction=False) as pipe:
        for k in keys:
            pipe.zrange(k.workers, 0, WORKERS_READ - 1, desc=True)
        indexes = await pipe.execute()
    entries = await _fleet_entries(client, queues)
    named = {(entry.queue, entry.fields.get("id")) for entry in entries}
    on_queue = {entry.queue for entry in entries}
    found: list[tuple[str, str]] = []
    for name, k, members in zip(queues, keys, indexes, strict=True):
        ids = [_text(m) for m in members]
        if not ids and name not in on_queue:
            ids = await _scanned(client, k)
        found += [
            (name, k.worker(worker_id)) for worker_id in ids if (name, worker_id) not in named
        ]
    read = await _read(client, [key for _, key in found])
    for (name, _), (fields, age) in zip(found, read, strict=True):
        if fields is not None:
            entries.append(Entry(name, fields, age))
    return entries


async def _fleet_entries(client: Redis, queues: Sequence[str]) -> list[Entry]:
    """The entries in `{emq}:workers` (none when the ACL refuses that key), one per queue asked
    about that the worker serves."""
    try:
        members = await client.zrange(WORKERS_KEY, 0, WORKERS_READ - 1, desc=True)
    except NoPermissionError:
        return []
    wanted = set(queues)
    entries = []
    ids = [_text(member) for member in members if isinstance(member, bytes | str)]
    for fields, age in await _read(client, [worker_entry_key(worker_id) for worker_id in ids]):
        if fields is None:
            continue
        held = fields.pop(HELD_ON, None)
        held = held if isinstance(held, dict) else {}
        for name in fields.get("queues", ()):
            if name in wanted:
                here = held.get(name) or {"held_here": 0, "jobs": []}
                entries.append(Entry(name, {**fields, **here}, age))
    return entries


async def _read(client: Redis, keys: list[str]) -> list[tuple[dict[str, Any] | None, int]]:
    """Each entry of `keys` (decoded; None when it expired or is not ours), and its age in ms
    from its TTL."""
    if not keys:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
            pipe.pttl(key)
        replies = await pipe.execute()
    read = []
    for value, ttl in zip(replies[::2], replies[1::2], strict=True):
        fields = _decoded(value)
        ttl_ms = int(str(fields.get("ttl_ms", 0)) or 0) if fields else 0
        age = max(0, ttl_ms - int(ttl)) if ttl_ms and int(ttl) >= 0 else 0
        read.append((fields, age))
    return read


async def _scanned(client: Redis, keys: QueueKeys) -> list[str]:
    found: list[str] = []
    async for page in BoundedScan(client, keys.worker("*")).pages():
        found += [_text(key)[len(keys.worker("")) :] for key in page]
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
