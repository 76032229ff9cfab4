"""Ask one live worker to quiet down or stop (protocol/control.py): the request is written into
that worker's presence entry, `{emq}:worker:<id>`, or its entry on each queue it serves when its
entries are per queue (an ACL refusing the `{emq}:` keys); its next refresh reads it back. A
token pushed onto `{emq}:worker:<id>:ask`, which the worker's park watches, makes that refresh
come at once."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio import Redis

from emq_worker.admin.verbs import AdminError
from emq_worker.errors import ConfigError
from emq_worker.protocol import control
from emq_worker.protocol.keys import QueueKeys, worker_ask_key, worker_entry_key
from emq_worker.runtime.presence_read import presence_entries

ASK_TOKEN_TTL_MS = 60_000
"""Longer than any park: a token no worker took (one too old to watch the list) goes by itself."""
WORKER_ID_MAX = 300
"""Longer than any id a worker mints (host:pid:hex): anything longer is not one."""


class UnknownWorkerError(AdminError, LookupError):
    def __init__(self, worker_id: str) -> None:
        super().__init__(
            f"no live worker {worker_id!r} (its presence entry expired, or it never announced "
            "itself): `emq-worker workers` lists the live ones"
        )


def validate_worker_id(worker_id: str) -> str:
    if not worker_id or len(worker_id) > WORKER_ID_MAX or not worker_id.isprintable():
        raise ConfigError(f"not a worker id: {worker_id[:80]!r}")
    if any(ch.isspace() for ch in worker_id):
        raise ConfigError(f"not a worker id (it holds a space): {worker_id[:80]!r}")
    return worker_id


async def ask_worker(
    client: Redis,
    worker_id: str,
    asked: str,
    find_queues: Callable[[], Awaitable[Sequence[str]]],
) -> str:
    """Write `asked` (`quiet` or `stop`) into the live worker `worker_id`'s presence entry;
    the key written (the first, for a worker with an entry per queue). `find_queues` names the
    queues to look for an entry per queue on (read only when the worker has no entry of its
    own). A worker's refresh between the read and the write here is harmless: it is the older
    entry, with the request, that the next refresh reads back."""
    if asked not in control.ASKS:
        raise ConfigError(f"a worker can be asked to {' or '.join(control.ASKS)}, not {asked!r}")
    validate_worker_id(worker_id)
    own = worker_entry_key(worker_id)
    keys = (
        [own]
        if await client.exists(own)
        else await _per_queue_keys(client, worker_id, await find_queues())
    )
    written = [key for key in keys if await _write_ask(client, key, asked)]
    if not written:
        raise UnknownWorkerError(worker_id)
    if written == [own]:
        await _wake(client, worker_id)
    return written[0]


async def _wake(client: Redis, worker_id: str) -> None:
    """End the worker's park (it watches this list), so that an idle worker hears the request
    at once rather than at its next refresh; the token lapses unread with a worker too old to
    watch it."""
    key = worker_ask_key(worker_id)
    async with client.pipeline(transaction=False) as pipe:
        pipe.lpush(key, "1")
        pipe.ltrim(key, 0, 0)
        pipe.pexpire(key, ASK_TOKEN_TTL_MS)
        await pipe.execute()


async def _write_ask(client: Redis, key: str, asked: str) -> bool:
    """Add `asked` to the entry at `key`, keeping its expiry; False when it is gone."""
    raw = await client.get(key)
    if raw is None:
        return False
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        raise AdminError(f"the presence entry {key} is not JSON: {exc}") from exc
    fields[control.ASKED] = asked
    written = await client.set(
        key, json.dumps(fields, separators=(",", ":")), xx=True, keepttl=True
    )
    return bool(written)


async def _per_queue_keys(client: Redis, worker_id: str, queues: Sequence[str]) -> list[str]:
    keys = [
        QueueKeys.of(entry.queue).worker(worker_id)
        for entry in await presence_entries(client, queues)
        if entry.fields.get("id") == worker_id
    ]
    if not keys:
        raise UnknownWorkerError(worker_id)
    return keys
