"""The server clock of the node that holds a queue.

TIME is read through a one-line script keyed on one of the queue's keys: a cluster routes it to
that queue's node (the clock its scripts use), where a plain TIME names no key to route by and a
cluster pipeline refuses it. On a single server it is simply the server's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

TIME_ON_KEY = "return redis.call('TIME')"


def queue_time(target: Any, key: str) -> Any:
    """Send TIME to `key`'s node on a client or pipeline; `to_ms` reads the reply."""
    return target.eval(TIME_ON_KEY, 1, key)


def to_ms(reply: Sequence[Any]) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


async def server_ms(client: Redis, key: str) -> int:
    """Milliseconds on the clock of the node that holds `key`."""
    return to_ms(await queue_time(client, key))
