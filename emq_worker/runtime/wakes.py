"""Waiting for a wake token on several queues at once.

On one server the park is a single `BLPOP` naming every queue's wake key. In a cluster, a BLPOP
may only name keys of one slot (else CROSSSLOT), even when two slots live on the same node, and
each queue has its own slot. So a clustered park sends one BLPOP per slot concurrently, each on
its own pooled connection, with the park's timeout; the first token ends the park and the other
BLPOPs are cancelled. A cancelled BLPOP's connection is dropped (its reply can no longer be read)
and re-opened by the next park: an idle worker pays nothing (every BLPOP times out together on
the server), a woken one pays one reconnect per other parked slot. A token a cancelled BLPOP had
already taken is lost, which costs nothing: the woken worker drains every queue next.

At most MAX_PARKED slots are parked on at once; with more queues the window rotates each park.
After each park, `unwatched` names the keys that were not waited on to the end: those outside the
window, and those whose BLPOP was cancelled (it may have taken a token that is now lost). The
supervisor treats their queues as woken: it claims them on the next pass, as if a token came.

A clustered BLPOP whose node cannot be reached (or whose slot is moving) ends the park with
`ParkUnavailableError` naming its keys, so that only the queues on that slot rest
(runtime/isolation.py): a park spanning several slots never fails the whole beat for one lost node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.protocol.keys import hash_slot
from emq_worker.valkey.cluster import ClusterUnavailableError, as_cluster

MAX_PARKED = 16
"""The most blocking connections one worker holds while parked."""


Popped = tuple[str, bytes]
"""What a park's BLPOP took: the key, and the wake token or hand-off (offers.py) it held."""


class ParkUnavailableError(ClusterUnavailableError):
    """A clustered park's BLPOP on `keys` (one slot) met its node lost or its slot moving."""

    def __init__(self, keys: Sequence[str], cause: ClusterUnavailableError) -> None:
        super().__init__(str(cause))
        self.keys = tuple(keys)


class WakeWaiter:
    """`await waiter.wait(keys, timeout)`: what was popped, or None when the timeout passed."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.clustered = as_cluster(client) is not None
        self._rotation = 0
        self.unwatched: list[str] = []
        """The keys the last wait did not watch to its end (a cluster's several BLPOPs)."""

    def spans_slots(self, keys: Sequence[str]) -> bool:
        """True when a park on `keys` takes several BLPOPs (a cluster, keys on several slots)."""
        return self.clustered and len(by_slot(keys)) > 1

    async def wait(self, keys: Sequence[str], timeout_s: float) -> Popped | None:
        seconds = max(0.01, round(timeout_s, 3))
        groups = by_slot(keys) if self.clustered else [list(keys)]
        self.unwatched = []
        if len(groups) > 1:
            window = self._window(groups)
            self.unwatched = [key for group in groups if group not in window for key in group]
            return await self._first_of(window, seconds)
        try:
            return popped(await self.client.blpop(groups[0], timeout=seconds))
        except ClusterUnavailableError as exc:
            raise ParkUnavailableError(groups[0], exc) from exc

    def _window(self, groups: list[list[str]]) -> list[list[str]]:
        if len(groups) <= MAX_PARKED:
            return groups
        start = self._rotation % len(groups)
        self._rotation += MAX_PARKED
        return [groups[(start + i) % len(groups)] for i in range(MAX_PARKED)]

    async def _first_of(self, groups: list[list[str]], seconds: float) -> Popped | None:
        """The first token or the first error ends every BLPOP; an error is raised as itself
        (not in an ExceptionGroup) so the beat's retry on a lost connection applies. (A token a
        cancelled BLPOP had taken is lost; so a worker whose park spans slots makes no hand-off
        offers: a job handed to it could be lost the same way, until the reaper.)"""
        woken: Popped | None = None
        failure: RedisError | None = None
        cut_short = [key for group in groups for key in group]

        async def park_on(group: list[str], scope: anyio.CancelScope) -> None:
            nonlocal woken, failure
            try:
                taken = popped(await self.client.blpop(group, timeout=seconds))
                for key in group:
                    cut_short.remove(key)
                if taken is not None:
                    woken = woken or taken
                    scope.cancel()
            except ClusterUnavailableError as exc:
                failure = failure or ParkUnavailableError(group, exc)
                scope.cancel()
            except RedisError as exc:
                failure = failure or exc
                scope.cancel()

        async with anyio.create_task_group() as group_tasks:
            for group in groups:
                group_tasks.start_soon(park_on, group, group_tasks.cancel_scope)
        self.unwatched += cut_short
        if failure is not None and woken is None:
            raise failure
        return woken


def popped(reply: Any) -> Popped | None:
    """A BLPOP reply as (key, value); None on its timeout."""
    if reply is None:
        return None
    key, value = reply
    key = key.decode() if isinstance(key, bytes) else str(key)
    return key, value if isinstance(value, bytes) else str(value).encode()


def by_slot(keys: Sequence[str]) -> list[list[str]]:
    """The keys grouped by cluster slot, in first-seen order."""
    groups: dict[int, list[str]] = {}
    for key in keys:
        groups.setdefault(hash_slot(key), []).append(key)
    return list(groups.values())
