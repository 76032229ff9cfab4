"""Builds Redis clients. The only module that constructs one.

Every connection, first or re-made after a drop, runs the EchoMQ version fence before any caller
command: GET `{emq}:version`; when absent, SET NX and read it back; any other value is refused.
"""

from __future__ import annotations

from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, BlockingConnectionPool
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

from emq_worker.errors import ConfigError, VersionFenceError
from emq_worker.valkey.address import RedisAddress, address_of
from emq_worker.valkey.address import redacted as redacted  # where callers have imported it from
from emq_worker.valkey.cluster import connect_cluster
from emq_worker.valkey.fence import VERSION_KEY
from emq_worker.valkey.resend_once import ResendOnce

POOL_WAIT_S = 20.0
"""How long a command waits for a free pooled connection before it fails."""


DEFAULT_URL = "redis://localhost:6379/0"
"""Where a worker, producer or operator command connects when given no URL."""

DEFAULT_TIMEOUT_S = 5.0
"""How long a call may wait for the server's reply, and a connection for the server to accept
it, unless the caller says otherwise: a frozen server, or another service on the port, ends a
producer's or a command's call with an error instead of holding it forever."""
CONNECT_TIMEOUT_S = DEFAULT_TIMEOUT_S
"""The longest a connection may take to open, whatever the socket timeout: a worker whose
socket timeout outlasts its park re-dials no slower than a producer."""


def validate_url(url: str) -> str:
    """`url`, once RedisAddress.parse found nothing wrong with it (else ConfigError)."""
    RedisAddress.parse(url)
    return url


async def _read(conn: AbstractConnection, *command: str) -> Any:
    await conn.send_command(*command)
    return await conn.read_response()


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


async def check_version(conn: AbstractConnection, wire_version: str) -> None:
    """The version fence on one connection; never overwrites a present value."""
    found = _text(await _read(conn, "GET", VERSION_KEY))
    if found is None:
        await _read(conn, "SET", VERSION_KEY, wire_version, "NX")
        found = _text(await _read(conn, "GET", VERSION_KEY))
    if found != wire_version:
        raise VersionFenceError(wire_version, found)


class RestartWatch:
    """Notices a server restart: a (re)connection that finds another `run_id` than the last
    one this client saw logs `server_restarted` once. Without persistence the data is gone: the
    leases held are refused at the next renewal and the version fence is set again."""

    def __init__(self) -> None:
        self.run_id: str | None = None

    async def check(self, conn: AbstractConnection) -> None:
        try:
            info = _text(await _read(conn, "INFO", "server")) or ""
        except RedisError:
            return  # INFO denied (an ACL) or unsupported: restarts go unnoticed, nothing else
        run_id = next(
            (line[7:].strip() for line in info.splitlines() if line.startswith("run_id:")), None
        )
        if run_id is None:
            return
        if self.run_id is not None and run_id != self.run_id:
            # The server layer sits below observe/: it takes the package's logger directly.
            structlog.get_logger("emq_worker").warning(
                "server_restarted",
                previous_run_id=self.run_id,
                run_id=run_id,
                note="without persistence its data is gone; held leases are re-checked at the "
                "next renewal and refused writes are logged",
            )
        self.run_id = run_id


def connect(
    url: str | RedisAddress,
    wire_version: str,
    *,
    socket_timeout_s: float | None = DEFAULT_TIMEOUT_S,
    connect_timeout_s: float | None = None,
    max_connections: int = 32,
    **options: Any,
) -> Redis:
    """A client whose every (re)connection is fenced on `{emq}:version`, at `url` (a string is
    parsed here: pass the RedisAddress where one was made).

    Bytes in, bytes out (payloads are opaque). `socket_timeout_s` bounds the wait for each
    reply (None: no bound) and must exceed the longest blocking command the caller sends (the
    supervisor's park); a connection must open within it too, and within CONNECT_TIMEOUT_S.
    The pool blocks when all `max_connections` are busy instead of failing, so a burst of
    concurrent settles waits its turn rather than erroring. A connection the server dropped
    while idle is replaced before use; a command whose connection is lost in flight is re-sent
    once only inside `server.resend.resend_once()` (the idempotent verbs).

    A `redis+cluster://` URL gets a cluster client instead (server.cluster), fenced once per
    discovery of the cluster rather than per connection. `connect_timeout_s` bounds each dial
    (None: the socket timeout, at most CONNECT_TIMEOUT_S; a URL's own `socket_connect_timeout`
    wins on a cluster).
    """
    address = address_of(url)
    check_socket_timeout(socket_timeout_s)
    dial_s = connect_timeout(socket_timeout_s) if connect_timeout_s is None else connect_timeout_s
    if address.cluster is not None:
        return connect_cluster(
            address.cluster,
            wire_version,
            socket_timeout_s=socket_timeout_s,
            connect_timeout_s=dial_s,
            max_connections=max_connections,
            wrap_connection=our_connection,
        )

    restarts = RestartWatch()

    async def fenced_on_connect(conn: AbstractConnection) -> None:
        await conn.on_connect()
        await check_version(conn, wire_version)
        await restarts.check(conn)

    settings: dict[str, Any] = {
        "max_connections": max_connections,
        "timeout": POOL_WAIT_S,
        "decode_responses": False,
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": dial_s,
        "redis_connect_func": fenced_on_connect,
        "retry": ResendOnce(),
        **_without_maintenance_notices(),
    }
    pool = BlockingConnectionPool.from_url(address.url, **(settings | options))
    pool.connection_class = our_connection(pool.connection_class)
    return Redis.from_pool(pool)


def check_socket_timeout(seconds: float | None) -> None:
    """Refuse a socket timeout that is not a positive number of seconds (None: no bound)."""
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ConfigError(
            f"socket_timeout_s must be a number of seconds > 0 (or None: wait for ever); "
            f"got {seconds!r}"
        )


def connect_timeout(socket_timeout_s: float | None) -> float:
    """How long a connection may take to open: the socket timeout, at most CONNECT_TIMEOUT_S."""
    if socket_timeout_s is None:
        return CONNECT_TIMEOUT_S
    return min(socket_timeout_s, CONNECT_TIMEOUT_S)


def socket_timeout_of(client: Redis) -> float | None:
    """The socket timeout `client` was built with (None: it waits for ever), read where redis-py
    keeps it, so code handed a client can keep its own blocking calls inside it."""
    kwargs: dict[str, Any] = client.get_connection_kwargs()  # type: ignore[no-untyped-call]
    value = kwargs.get("socket_timeout")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _without_maintenance_notices() -> dict[str, Any]:
    """redis-py >= 7 turns maintenance notices (a Redis Enterprise feature) on by default over
    RESP3, and while they are on its pool skips the check that a connection it hands out was
    not closed by the server while idle: the next command is written to a dead socket and fails
    ("Connection closed by server"). Off, a dropped idle connection is replaced before anything
    is sent on it, as redis-py 5 always did."""
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py < 7: no such notices, and the check always runs
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


class _HiredisPack:
    """Packs commands with hiredis' C packer, as redis-py's sync client does; its asyncio
    connections pack in Python, which costs more than the rest of a batch call's client work."""

    _serializer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        command = args[0]
        if (" " if isinstance(command, str) else b" ") in command:
            return self._general(*args)  # "SCRIPT LOAD" and the like: redis-py splits them
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return self._general(*args)  # a memoryview or bytearray argument

    def _general(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._serializer.pack(*args)
        return packed


_UVLOOP_CLOSED = "the handler is closed"
"""The end of uvloop's RuntimeError for an operation on a transport already closed."""


class _ResetIsLost:
    """A write on a connection its peer reset is a lost connection (ConnectionError), as
    redis-py makes of the OSError asyncio's own loop raises, whatever the event loop.

    uvloop closes a transport as soon as the peer resets it (a server SIGKILLed just as a
    connection to it opened, or while one was idle in the pool), and the next write on it
    raises `RuntimeError: unable to perform operation on <TCPTransport closed=True ...>; the
    handler is closed`: redis-py lets it through, so no retry, resend or per-queue scoping
    applied, and a worker at a primary's failover exited. (redis-py has already dropped the
    connection when the error reaches here: the next use reconnects.)"""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except RuntimeError as exc:
            if not str(exc).endswith(_UVLOOP_CLOSED):
                raise
            raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc


def our_connection(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """`connection_class` as every client here uses it: a reset under a write is a lost
    connection (_ResetIsLost); commands packed by hiredis where it is installed."""
    bases: tuple[type, ...] = (_ResetIsLost, connection_class)
    if HIREDIS_AVAILABLE:
        bases = (_HiredisPack, *bases)
    name = f"{'HiredisPacked' if HIREDIS_AVAILABLE else ''}{connection_class.__name__}"
    return type(name, bases, {})
