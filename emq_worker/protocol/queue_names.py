"""`{emq}:queues`: the queues workers serve and producers enqueue to, named so the dashboard finds
them without walking the keyspace (a queue only EchoMQ's producers use is not named: the dashboard
still finds it by a bounded SCAN, and its search looks a job id up without the list)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.protocol.keys import QUEUES_KEY
from emq_worker.valkey.cluster import as_cluster
from emq_worker.valkey.failures import fatal

QUEUES_KEPT_MS = 14 * 24 * 3600 * 1000
"""A queue nobody has named for this long leaves `{emq}:queues`."""
PRODUCER_RENAMES_S = 3600.0
"""A producer names a queue again at most this often (the dashboard lists a queue named within
the last day, so an hourly word keeps a long-lived producer's queues listed)."""


async def name_queues(client: Redis, names: Iterable[str]) -> None:
    """Say in `{emq}:queues` that these queues are in use, and drop the names not said for
    QUEUES_KEPT_MS. A RedisError propagates (NOPERM for an ACL without the key)."""
    seen_ms = int(time.time() * 1000)
    members = dict.fromkeys(names, seen_ms)
    if not members:
        return
    async with client.pipeline(transaction=False) as pipe:
        pipe.zadd(QUEUES_KEY, members)
        pipe.zremrangebyscore(QUEUES_KEY, "-inf", seen_ms - QUEUES_KEPT_MS)
        pipe.pexpire(QUEUES_KEY, QUEUES_KEPT_MS)
        await pipe.execute()


class ProducerNames:
    """A producer's naming of the queues it enqueues to: before its first enqueue to a queue,
    then at most every PRODUCER_RENAMES_S. An ACL that refuses the key stops it for good (the
    enqueue goes on: naming is a courtesy to the dashboard, never a condition of a write)."""

    def __init__(self, client: Redis, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._named: dict[str, float] = {}
        self._refused = False

    async def note(self, queue: str) -> None:
        now = self.clock()
        last = self._named.get(queue)
        if self._refused or (last is not None and now - last < PRODUCER_RENAMES_S):
            return
        try:
            await name_queues(self.client, [queue])
        except RedisError as exc:
            # In a cluster `{emq}:queues` may live on another node than the queue: its trouble
            # must not fail the enqueue. A refusal stops the naming; anything else is retried
            # at the next enqueue. On one server a silent or unreachable one is the enqueue's
            # trouble too: say so now rather than after waiting out the enqueue's own timeout.
            if isinstance(exc, RedisConnectionError | RedisTimeoutError) and (
                as_cluster(self.client) is None
            ):
                raise
            self._refused = fatal(exc)
            return
        self._named[queue] = now
