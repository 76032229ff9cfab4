"""The version fence of a cluster client: awaited once, then re-checked without blocking.

A single server's client fences every (re)connection. A cluster client fences when it (re)builds
its slot map (server.cluster). The first fence is awaited: no command goes out before
`{emq}:version` was read (or set, when absent) and matched; a first read that cannot reach the
key fails the command that asked for it (a lost node), and the next command fences again.
Later rebuilds follow a lost node, a failover or a moved slot; an awaited check there would make
the node owning `{emq}:version` a single point of failure: while it is down (until its replica
leads) every rebuild's check fails, and with it every command to every node. So after the first
verdict, each rebuild only asks for a re-check, run in the background while commands go on under
the last verdict:

- the key's node answers with the wire version (or the key is absent and SET NX restores it, as
  after a failover to a replica that had not received it): the verdict stands;
- it answers with another value: the verdict becomes that refusal, and every later command
  raises `VersionFenceError`, as a single server's next connection would;
- it cannot be reached: the re-check is tried again at the next rebuild or, while commands flow,
  after RECHECK_RETRY_S.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Final, Protocol

import structlog
from redis.exceptions import RedisClusterException, RedisError

from emq_worker.errors import VersionFenceError

VERSION_KEY: Final = "{emq}:version"
"""Holds the wire version (default `echomq:3.0.0`); never overwritten once present."""
RECHECK_RETRY_S = 1.0
"""How soon a re-check that could not reach `{emq}:version` is tried again."""
RECANCEL_S = 0.05
"""How soon closing cancels again a re-check that is still running (it swallowed the cancel)."""


class VersionStore(Protocol):
    """What the fence reads and writes through: the cluster client, routed by the key's slot."""

    def get(self, name: str) -> Awaitable[bytes | str | None]: ...

    def set(self, name: str, value: str, *, nx: bool) -> Awaitable[object]: ...


async def read_version(store: VersionStore, wire_version: str) -> None:
    """GET `{emq}:version`; when absent, SET NX and read it back; any other value is refused."""
    found = await store.get(VERSION_KEY)
    if found is None:
        await store.set(VERSION_KEY, wire_version, nx=True)
        found = await store.get(VERSION_KEY)
    text = found.decode() if isinstance(found, bytes) else found
    if text != wire_version:
        raise VersionFenceError(wire_version, text)


class ClusterFence:
    """The verdict on `{emq}:version` for one cluster client, and its re-checks."""

    def __init__(self, wire_version: str) -> None:
        self.wire_version = wire_version
        self.checks = 0
        """Reads of the key started (awaited or in the background)."""
        self.passed = False
        self.refused: VersionFenceError | None = None
        self._wanted = 0
        """Rebuilds since the first verdict; a re-check is due while `_checked` lags behind."""
        self._checked = 0
        self._retry_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._fencing = False
        """The first check's read is under way (the rebuilds its retries ask for do not fence)."""

    async def discovered(self, store: VersionStore) -> None:
        """The client (re)built its slot map: the first time, fence before any command; later,
        ask for a re-check in the background."""
        if not self.passed:
            if self._fencing:
                # The first check's own read met a lost node, and redis-py's retry of it rebuilt
                # the map: that read's next try decides. (Reading again here nested one check in
                # the other, each retry deeper, holding the command until the key's node led.)
                return
            self._fencing = True
            self.checks += 1
            try:
                await read_version(store, self.wire_version)
            finally:
                self._fencing = False
            self.passed = True
            return
        self._wanted += 1
        self.recheck_due(store)

    def verdict(self) -> None:
        """Raise the refusal a re-check met, if any (before a command goes out)."""
        if self.refused is not None:
            raise self.refused

    def recheck_due(self, store: VersionStore) -> None:
        """Start the background re-check when one is due, none runs, and the last attempt that
        could not reach the key is RECHECK_RETRY_S old."""
        due = self._checked < self._wanted and time.monotonic() >= self._retry_at
        if due and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._recheck(store))

    async def _recheck(self, store: VersionStore) -> None:
        wanted = self._wanted
        self.checks += 1
        try:
            await read_version(store, self.wire_version)
        except VersionFenceError as exc:
            self.refused = exc
            structlog.get_logger("emq_worker").error(
                "version_fence_refused", found=exc.found, error=str(exc)
            )
        except (RedisError, RedisClusterException) as exc:  # the latter: no node answered
            self._retry_at = time.monotonic() + RECHECK_RETRY_S
            structlog.get_logger("emq_worker").info("version_recheck_deferred", error=str(exc))
            return
        self._checked = max(self._checked, wanted)

    async def reset(self) -> None:
        """The client is closing: end the re-check under way (before the connections close);
        the client's next use fences again before any command.

        The re-check is cancelled until it has ended, not once: a cancel can be swallowed (on
        Python 3.11, `asyncio.wait_for`, which redis-py's send awaits, returns the write's result
        when the cancel came in the loop turn the write completed in), and a re-check that went
        on read through the client after its close, which re-opened it (redis-py rebuilds a
        closed cluster client at its next command) for good: CI's unclosed FencedCluster."""
        while (task := self._task) is not None and not task.done():
            if task is asyncio.current_task():
                break  # closed from the re-check itself: it ends by returning
            task.cancel()
            await asyncio.wait({task}, timeout=RECANCEL_S)
        self._task = None
        self.passed = False
        self._checked = self._wanted = 0
