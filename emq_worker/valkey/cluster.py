"""Redis/Valkey Cluster: the client, and what its transient errors mean to us.

A cluster URL (valkey/cluster_url.py) names one or more seed nodes. Every per-queue key carries the
`{q}` hash tag, so a queue lives on one slot and every script runs on the node that owns it;
`{emq}:version` lives on its own slot.

The client is redis-py's asyncio `RedisCluster`, which follows MOVED and ASK, retries TRYAGAIN and
re-reads the slot map after a failover. What is added here keeps a lost node's trouble with the
queues on its slots:

- The version fence (server.fence) is awaited when the client first discovers the cluster, then
  re-checked in the background each time it rebuilds its slot map: the node owning
  `{emq}:version` being down holds back no command to any other node.
- Errors that mean "the cluster is moving" (CLUSTERDOWN, TRYAGAIN after redis-py's own retries,
  a slot no node covers, a script that met a key already moved away) and a node that cannot be
  reached are raised as `ClusterUnavailableError`, a ConnectionError that server.failures scopes
  to the queue whose keys were touched: that queue rests, the beat goes on with the others, the
  renewal sweep retries that queue next tick.
- redis-py's own recovery never closes the connections of healthy nodes, and the slot map is
  re-read at most every REBUILD_EVERY_S (FencedCluster says why).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final, cast

from redis._parsers import AsyncCommandsParser
from redis.asyncio import Redis
from redis.asyncio.cluster import (
    ClusterNode,
    ClusterPipeline,
    NodesManager,
    PipelineCommand,
    RedisCluster,
)
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.errors import EmqError
from emq_worker.valkey.cluster_url import ClusterAddress
from emq_worker.valkey.fence import ClusterFence

NODE_CONNECTIONS = 64
"""Connections per node: the park holds one per parked queue, the rest serve commands."""
_MOVING_SCRIPT_ERRORS: Final = (
    "Script attempted to access a non local key",
    "Script attempted to execute a command while the cluster is down",
)
"""Error texts of a script that met a key in a slot being migrated, or a cluster going down:
the script stopped at that command. Retrying after the move completes is correct."""
REBUILD_EVERY_S = 0.25
"""The slot map is re-read at most this often once the client fenced (a failover takes longer)."""


class ClusterUnavailableError(RedisConnectionError):
    """The cluster is failing over, resharding or down: retry later, as for a lost connection."""


class NotAClusterError(EmqError, RedisError):
    """A `redis+cluster://` URL whose seed answered, but not as a cluster node: no retry cures
    that, the URL is wrong."""


def discovery_failed(exc: RedisClusterException, seeds: str) -> RedisError:
    """What redis-py's "Redis Cluster cannot be connected" (or another failed read of the slot
    map) means here: a seed that is no cluster node is the URL's fault (NotAClusterError);
    seeds that did not answer, or a map with holes, are a cluster not reachable yet
    (ClusterUnavailableError, retried like a lost connection)."""
    cause = exc.__cause__
    if isinstance(cause, RedisClusterException) and "not enabled" in str(cause):
        return NotAClusterError(
            f"the seed node {seeds} answered, but {cause}: a redis+cluster:// URL names "
            "cluster nodes; for a single server use redis://HOST:PORT/DB"
        )
    if isinstance(cause, RedisConnectionError | RedisTimeoutError):
        return ClusterUnavailableError(f"no seed node answered: {cause}")
    return ClusterUnavailableError(f"the cluster's slot map could not be read: {exc}")


def is_moving(error: Exception) -> bool:
    """True for an error reply that means "the cluster is changing; retry soon"."""
    if isinstance(error, ClusterDownError | TryAgainError):
        return True
    return isinstance(error, ResponseError) and str(error).startswith(_MOVING_SCRIPT_ERRORS)


_ASKED: ContextVar[ClusterNode | None] = ContextVar("emq_asked", default=None)


class _FencedNode(ClusterNode):
    """A cluster node that sends ASKING on the same connection as the command it is for, and
    hands out no connection it is closing.

    After an ASK redirect, redis-py 8.1's asyncio cluster sends `ASKING` and then the command as
    two separate node calls, each taking a pooled connection: with several idle connections they
    go out on different ones, the importing node sees the command without ASKING and answers
    MOVED, and the retry loop ends in "TTL exhausted". Here `ASKING` is only noted (for the
    calling task) and sent in one write with the next command on this node.

    redis-py closes a node's idle connections (after a command there met a lost connection, or
    when the node leaves the slot map) while they stay in the pool: a task that takes one before
    its close has run writes on a socket closed under it, and fails with an AttributeError
    (asyncio: the writer already None) or a RuntimeError (uvloop: "the handler is closed") that
    no caller retries; in a worker it ended the process at a primary's failover. Here they leave
    the pool while they close, and come back closed (the next use reconnects)."""

    __slots__ = ()

    async def execute_command(self, *args: Any, asking: bool = False, **kwargs: Any) -> Any:
        if args == ("ASKING",) and not kwargs:
            _ASKED.set(self)
            return True
        if _ASKED.get() is not self:
            return await super().execute_command(*args, asking=asking, **kwargs)
        _ASKED.set(None)
        commands = [PipelineCommand(0, "ASKING"), PipelineCommand(1, *args, **kwargs)]
        await self.execute_pipeline(commands)
        for command in commands:
            if isinstance(command.result, Exception):
                raise command.result
        return commands[1].result

    async def disconnect_free_connections(self) -> None:
        idle = list(self._free)
        self._free.clear()
        try:
            await asyncio.gather(
                *(connection.disconnect() for connection in idle), return_exceptions=True
            )
        finally:
            # Back unless the node was closed meanwhile (its pool emptied): then they are gone.
            owned = self._connections
            self._free.extend(connection for connection in idle if connection in owned)


class _FencedNodes(NodesManager):
    """redis-py's slot map, whose every node is a _FencedNode: those it creates on a rebuild
    of the map or a MOVED redirect all pass through set_nodes."""

    __slots__ = ()

    def set_nodes(
        self,
        old: dict[str, ClusterNode],
        new: dict[str, ClusterNode],
        remove_old: bool = False,
    ) -> None:
        for node in new.values():
            fenced_node(node)
        super().set_nodes(old, new, remove_old)


def fenced_node(node: ClusterNode) -> ClusterNode:
    """`node` as a _FencedNode (same slots, methods overridden: the pool and connections stay)."""
    if type(node) is ClusterNode:
        node.__class__ = _FencedNode
    return node


class _CommandTableOnce(AsyncCommandsParser):
    """redis-py's key finder, which reads the command table (`COMMAND`) once, not again at
    every rebuild of the slot map: a failover or a lost node does not change it, and its reply
    (240 commands on Redis 7, 257 on Valkey 9) is read under the lock every command waits on
    while the map is rebuilt: on a loaded machine it held the surviving nodes' queues 0.7 s at
    one rebuild after a primary was killed."""

    __slots__ = ()

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if node is not None:
            self.node = node  # where a command with movable keys asks COMMAND GETKEYS
        if not self.commands:
            await super().initialize(node)


_IN_PIPELINE: ContextVar[bool] = ContextVar("emq_in_pipeline", default=False)
_IN_COMMAND: ContextVar[bool] = ContextVar("emq_in_command", default=False)
"""Set while a command or pipeline runs: a close redis-py calls from inside one is its recovery
(CLUSTERDOWN, a pipeline's retry, repeated MOVED), not the caller's own close."""


class FencedCluster(RedisCluster):
    """A RedisCluster fenced on `{emq}:version` (server.fence: awaited on first discovery,
    re-checked in the background on every rebuild of the slot map) whose failures stay with the
    slots they concern:

    - a node that cannot be reached is reported as ClusterUnavailableError naming it, scoped
      (server.failures) to the queues whose slots that node owns;
    - redis-py's recovery from CLUSTERDOWN, a failed pipeline or repeated MOVED closes every
      connection to every node, failing the commands in flight on healthy nodes (a parked
      BLPOP, another queue's claim); here it only re-reads the slot map before the next command
      (a rebuild recycles each connection once its command is done)."""

    def __init__(self, wire_version: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wire_version = wire_version
        self.fence = ClusterFence(wire_version)
        self._rebuild_after = 0.0
        self.retry.__class__ = _CommandRetry
        self.commands_parser.__class__ = _CommandTableOnce
        self.nodes_manager.__class__ = _FencedNodes
        for node in self.nodes_manager.startup_nodes.values():
            fenced_node(node)

    @property
    def fence_checks(self) -> int:
        return self.fence.checks

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        fresh = self._initialize
        if fresh and self.fence.passed and time.monotonic() < self._rebuild_after:
            # redis-py asks for a rebuild after every failed try on a lost node (11 tries per
            # command), each one re-reading the slot map and the command table, under a lock
            # every other command waits on: the commands for the healthy nodes stalled behind
            # that churn. Until the map can have changed, keep the one just read.
            self._initialize = False
            return self
        try:
            await super().initialize(*args, **kwargs)
        except SlotNotCoveredError:
            raise
        except RedisClusterException as exc:
            seeds = ", ".join(self.nodes_manager.startup_nodes)
            raise discovery_failed(exc, seeds) from exc
        if fresh:
            self._rebuild_after = time.monotonic() + REBUILD_EVERY_S
            try:
                await self.fence.discovered(self)
            except BaseException:
                if not self.fence.passed:
                    self._initialize = True  # unfenced: the next command discovers and fences
                raise
        return self

    def rediscover(self) -> None:
        """Re-read the slot map before the next command; keep the connections."""
        self._initialize = True

    async def aclose(self) -> None:
        if _IN_COMMAND.get():
            self.rediscover()
            return
        await self.fence.reset()  # first: a re-check still running would re-open the client
        if self._initialize:  # rediscover() kept the connections: close them all the same
            await self.nodes_manager.aclose()
            await self.nodes_manager.aclose("startup_nodes")
        await super().aclose()

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        """Every node an ASK redirect reaches is looked up here: a _FencedNode (they all are:
        _FencedNodes; this keeps it so should redis-py add a node some other way)."""
        node = super().get_node(host, port, node_name)
        return fenced_node(node) if node is not None else None

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        self.fence.verdict()
        self.fence.recheck_due(self)
        entered = _IN_COMMAND.set(True)
        try:
            return await super().execute_command(*args, **kwargs)
        except (RedisError, SlotNotCoveredError) as exc:
            failure = scoped(exc)
            if failure is exc:
                raise  # already ours: `raise exc from exc` would make it its own cause
            raise failure from exc
        finally:
            _IN_COMMAND.reset(entered)

    def pipeline(
        self, transaction: Any | None = None, shard_hint: Any | None = None
    ) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        # As for _FencedNode: same slots, one method more. (Any: redis-py's CommandsProtocol
        # declares `_event_dispatcher` bare, so mypy deems every subclass abstract.)
        pipe.__class__ = cast(Any, _ScopedPipeline)
        return pipe


class _ScopedPipeline(ClusterPipeline):
    """A cluster pipeline under the same fence verdict, recovery and error scoping as single
    commands (FencedCluster), and without redis-py's retries (_CommandRetry says why)."""

    __slots__ = ()

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        client = self.cluster_client
        if isinstance(client, FencedCluster):
            client.fence.verdict()
        entered = _IN_COMMAND.set(True)
        piped = _IN_PIPELINE.set(True)
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except (RedisError, SlotNotCoveredError) as exc:
            failure = scoped(exc)
            if failure is exc:
                raise  # already ours: `raise exc from exc` would make it its own cause
            if isinstance(client, FencedCluster):
                client.rediscover()  # what redis-py's retry would have done first
            raise failure from exc
        finally:
            _IN_PIPELINE.reset(piped)
            _IN_COMMAND.reset(entered)


class _CommandRetry(Retry):
    """redis-py's retries, for single commands only. A cluster pipeline retries a lost node or
    CLUSTERDOWN by sleeping 0.25 s each time, 10 times: its caller (the presence beat, the
    renewal of the lost node's queue) would stall some 3 s. Without them the error comes at once
    and the caller's own retry (next beat, next tick, the settle batcher) applies."""

    def get_retries(self) -> int:
        return 0 if _IN_PIPELINE.get() else super().get_retries()


def scoped(exc: Exception) -> Exception:
    """What a cluster failure means here: a moving cluster or an unreachable node is a
    ClusterUnavailableError (scoped to a queue by server.failures); anything else is itself."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return unreachable(exc)
    # ClusterError alone: redirects or TRYAGAIN outlasted redis-py's TTL mid-reshard.
    if isinstance(exc, ClusterError | SlotNotCoveredError) or is_moving(exc):
        return ClusterUnavailableError(f"{type(exc).__name__}: {exc}")
    return exc


def unreachable(exc: RedisConnectionError | RedisTimeoutError) -> RedisConnectionError:
    """A lost or silent node as ClusterUnavailableError naming it (redis-py notes the node),
    so it is scoped to the queues on that node's slots, not to the whole worker."""
    if isinstance(exc, ClusterUnavailableError):
        return exc
    node = getattr(exc, "last_failed_node_name", None) or getattr(exc, "connection", None)
    where = f"node {getattr(node, 'name', node)} " if node is not None else ""
    return ClusterUnavailableError(f"{where}unreachable: {exc}")


def connect_cluster(
    address: ClusterAddress,
    wire_version: str,
    *,
    socket_timeout_s: float | None = None,
    connect_timeout_s: float = 5.0,
    max_connections: int = NODE_CONNECTIONS,
    wrap_connection: Callable[[type[AbstractConnection]], type[AbstractConnection]] | None = None,
) -> Redis:
    """A cluster client for `address`, typed as the `Redis` the rest of the worker speaks to.

    RedisCluster offers every command the worker sends (single-slot scripts, pipelines split by
    node, SCRIPT LOAD to every primary); the cast keeps the single-node modules unchanged."""
    options = address.options
    client = FencedCluster(
        wire_version,
        startup_nodes=[ClusterNode(host, port) for host, port in address.seeds],
        username=address.username,
        password=address.password,
        ssl=address.tls,
        decode_responses=False,
        max_connections=max(max_connections, NODE_CONNECTIONS),
        socket_timeout=float(options.get("socket_timeout", socket_timeout_s or 0)) or None,
        socket_connect_timeout=float(options.get("socket_connect_timeout", connect_timeout_s)),
        client_name=options.get("client_name"),
    )
    if wrap_connection is not None:  # e.g. hiredis command packing, as for a single server
        kwargs = client.nodes_manager.connection_kwargs
        kwargs["connection_class"] = wrap_connection(kwargs["connection_class"])
    return cast(Redis, client)


def as_cluster(client: Redis) -> RedisCluster | None:
    """The client as a RedisCluster when it is one (it was built by connect_cluster)."""
    return client if isinstance(client, RedisCluster) else None
