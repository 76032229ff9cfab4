"""Redis/Valkey Cluster: the URL, the client, and what its transient errors mean to us.

A cluster URL names one or more seed nodes: `redis+cluster://[user:pass@]host:port[,host:port...]`
(`rediss+cluster://` for TLS). Every per-queue key carries the `{q}` hash tag, so a queue lives on
one slot and every script runs on the node that owns it; `{emq}:version` lives on its own slot.

The client is redis-py's asyncio `RedisCluster`, which follows MOVED and ASK, retries TRYAGAIN and
re-reads the slot map after a failover. Two things are added here:

- The version fence runs once each time the client (re)builds its slot map: on first use, and
  after it dropped its connections (a failover, a node that stopped answering, repeated MOVED).
  The GET goes through the cluster client, so it reaches the node owning `{emq}:version`.
- Errors that mean "the cluster is moving" (CLUSTERDOWN, TRYAGAIN after redis-py's own retries,
  a slot no node covers, a script that met a key already moved away) are raised as
  `ClusterUnavailableError`, a ConnectionError: the beat backs off and tries again, the renewal
  sweep retries next tick, exactly as when a single server is briefly unreachable.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import parse_qsl, unquote

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from emq_worker.errors import ConfigError, VersionFenceError
from emq_worker.server.fence import VERSION_KEY
from emq_worker.server.urls import split_url

CLUSTER_SCHEMES: Final = ("redis+cluster", "rediss+cluster")
NODE_CONNECTIONS = 64
"""Connections per node: the park holds one per parked queue, the rest serve commands."""
_MOVING_SCRIPT_ERRORS: Final = (
    "Script attempted to access a non local key",
    "Script attempted to execute a command while the cluster is down",
)
"""Error texts of a script that met a key in a slot being migrated, or a cluster going down:
the script stopped at that command. Retrying after the move completes is correct."""
_OPTIONS: Final = {"socket_timeout", "socket_connect_timeout", "client_name"}


class ClusterUnavailableError(RedisConnectionError):
    """The cluster is failing over, resharding or down: retry later, as for a lost connection."""


@dataclass(frozen=True, slots=True)
class ClusterAddress:
    """A parsed cluster URL."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool
    options: dict[str, str]


def is_cluster_url(url: str) -> bool:
    return split_url(url).scheme in CLUSTER_SCHEMES


def parse_cluster_url(url: str) -> ClusterAddress:
    """`redis+cluster://[user:pass@]host:port[,host:port...][?client_name=x]`; every error names
    the offending part (never the password)."""
    parts = split_url(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ConfigError(
            f"a cluster URL starts with {' or '.join(s + '://' for s in CLUSTER_SCHEMES)}; "
            f"got {parts.scheme or '(none)'!r}"
        )
    credentials, _, hosts = parts.netloc.rpartition("@")
    username = password = None
    if credentials:
        user, sep, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if sep else None
    seeds = tuple(_seed(item) for item in hosts.split(","))
    if parts.path not in ("", "/", "/0"):
        raise ConfigError(
            f"a cluster has only database 0; remove {parts.path!r} from the cluster URL"
        )
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    for name in options:
        if name not in _OPTIONS:
            raise ConfigError(
                f"unknown cluster URL option {name!r}; known: {', '.join(sorted(_OPTIONS))}"
            )
    return ClusterAddress(seeds, username, password, parts.scheme == "rediss+cluster", options)


def _seed(item: str) -> tuple[str, int]:
    host, sep, port = item.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(
            f"each cluster seed must be HOST:PORT (e.g. 10.0.0.5:7000); got {item.strip()!r}"
        )
    return host, int(port)


def is_moving(error: Exception) -> bool:
    """True for an error reply that means "the cluster is changing; retry soon"."""
    if isinstance(error, ClusterDownError | TryAgainError):
        return True
    return isinstance(error, ResponseError) and str(error).startswith(_MOVING_SCRIPT_ERRORS)


_ASKED: ContextVar[ClusterNode | None] = ContextVar("emq_asked", default=None)


class _AskingNode(ClusterNode):
    """A node that sends ASKING on the same connection as the command it is for.

    After an ASK redirect, redis-py 8.1's asyncio cluster sends `ASKING` and then the command as
    two separate node calls, each taking a pooled connection: with several idle connections they
    go out on different ones, the importing node sees the command without ASKING and answers
    MOVED, and the retry loop ends in "TTL exhausted". Here `ASKING` is only noted (for the
    calling task) and sent in one write with the next command on this node."""

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


class FencedCluster(RedisCluster):
    """A RedisCluster that checks `{emq}:version` whenever it (re)discovers the cluster, and
    reports moving-cluster errors as ClusterUnavailableError."""

    def __init__(self, wire_version: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wire_version = wire_version
        self.fence_checks = 0

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        fresh = self._initialize
        await super().initialize(*args, **kwargs)
        if fresh:
            await self.check_version()
        return self

    async def check_version(self) -> None:
        """The version fence, read through the cluster so it routes to `{emq}`'s slot."""
        self.fence_checks += 1
        found = await self.get(VERSION_KEY)
        if found is None:
            await self.set(VERSION_KEY, self.wire_version, nx=True)
            found = await self.get(VERSION_KEY)
        text = found.decode() if isinstance(found, bytes) else found
        if text != self.wire_version:
            raise VersionFenceError(self.wire_version, text)

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        """Every node an ASK redirect reaches is looked up here: make it an _AskingNode."""
        node = super().get_node(host, port, node_name)
        if node is not None and type(node) is ClusterNode:
            node.__class__ = _AskingNode
        return node

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except (ResponseError, ClusterError, SlotNotCoveredError) as exc:
            # ClusterError alone: redirects or TRYAGAIN outlasted redis-py's TTL mid-reshard.
            if isinstance(exc, ClusterError | SlotNotCoveredError) or is_moving(exc):
                raise ClusterUnavailableError(f"{type(exc).__name__}: {exc}") from exc
            raise


def connect_cluster(
    url: str,
    wire_version: str,
    *,
    socket_timeout_s: float | None = None,
    max_connections: int = NODE_CONNECTIONS,
    wrap_connection: Callable[[type[AbstractConnection]], type[AbstractConnection]] | None = None,
) -> Redis:
    """A cluster client for `url`, typed as the `Redis` the rest of the worker speaks to.

    RedisCluster offers every command the worker sends (single-slot scripts, pipelines split by
    node, SCRIPT LOAD to every primary); the cast keeps the single-node modules unchanged."""
    address = parse_cluster_url(url)
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
        socket_connect_timeout=float(options.get("socket_connect_timeout", 5.0)),
        client_name=options.get("client_name"),
    )
    if wrap_connection is not None:  # e.g. hiredis command packing, as for a single server
        kwargs = client.nodes_manager.connection_kwargs
        kwargs["connection_class"] = wrap_connection(kwargs["connection_class"])
    return cast(Redis, client)


def as_cluster(client: Redis) -> RedisCluster | None:
    """The client as a RedisCluster when it is one (it was built by connect_cluster)."""
    return client if isinstance(client, RedisCluster) else None
