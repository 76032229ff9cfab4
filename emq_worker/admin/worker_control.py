"""Ask one live worker to quiet down or stop (protocol/control.py): the request is written where
that worker's beat reads it, `{emq}:control:<id>`, or `emq:{q}:control:<id>` on the first queue it
serves when its entry is per queue (an ACL refusing the `{emq}:` keys)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio import Redis

from emq_worker.admin.verbs import AdminError
from emq_worker.errors import ConfigError
from emq_worker.protocol import control
from emq_worker.protocol.keys import QueueKeys, worker_control_key, worker_entry_key
from emq_worker.runtime.presence_read import presence_entries

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
    """Write `asked` (`quiet` or `stop`) for the live worker `worker_id`; the key written.
    `find_queues` names the queues to look for an entry per queue on (read only when the
    worker has no entry of its own)."""
    if asked not in control.ASKS:
        raise ConfigError(f"a worker can be asked to {' or '.join(control.ASKS)}, not {asked!r}")
    validate_worker_id(worker_id)
    if await client.exists(worker_entry_key(worker_id)):
        key = worker_control_key(worker_id)
    else:
        key = await _per_queue_key(client, worker_id, await find_queues())
    await client.set(key, asked, px=control.KEEP_MS)
    return key


async def _per_queue_key(client: Redis, worker_id: str, queues: Sequence[str]) -> str:
    for entry in await presence_entries(client, queues):
        if entry.fields.get("id") == worker_id:
            served = entry.fields.get("queues") or [entry.queue]
            return QueueKeys.of(str(served[0])).control(worker_id)
    raise UnknownWorkerError(worker_id)
