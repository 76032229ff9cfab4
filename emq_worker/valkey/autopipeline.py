"""The handlers' client: the commands that concurrent handlers send in one turn of the event loop
go out together, in one write on one connection, and their replies come back in order.

A hundred handlers that each make one call would otherwise take a hundred round trips, each
borrowing a pooled connection for itself (redis-py's asyncio client spends most of a small
command's cost there). Batched this way, a call costs the worker about a quarter of the CPU, and
the handlers share a few connections (`max_batches` in flight), as ioredis' auto-pipelining does
for BullMQ on Node.js. Measured with `python -m bench.handler_client`.

The client's socket timeout bounds each batch's round trip as one loop timer: redis-py arms one
per reply read (and a task per write) on a connection with a socket timeout, which cost a call
about 6 us more, half its cost to the worker.

Commands that block the connection (BLPOP, XREAD BLOCK, WAIT, ...) are not batched: each takes a
connection of its own, so it never holds up the others' replies. `pipeline()`, `pubsub()` and the
rest of redis-py's client behave as usual. A batch is written and read outside the tasks that
asked for it, so a handler cancelled mid-call never cuts a reply in half on a shared connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, Connection
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

BLOCKING = frozenset(
    {
        "BLPOP",
        "BRPOP",
        "BRPOPLPUSH",
        "BLMOVE",
        "BLMPOP",
        "BZPOPMIN",
        "BZPOPMAX",
        "BZMPOP",
        "XREAD",
        "XREADGROUP",
        "WAIT",
        "WAITAOF",
        "MULTI",
        "EXEC",
        "WATCH",
        "UNWATCH",
        "DISCARD",
        "SUBSCRIBE",
        "PSUBSCRIBE",
        "SSUBSCRIBE",
        "MONITOR",
    }
)
"""Sent on a connection of their own: they block it, or they bind it to one caller's state."""

MAX_BATCHES = 4
"""Batches in flight at once, each on its own connection; later commands wait for the next."""

Waiting = tuple[tuple[Any, ...], dict[str, Any], "asyncio.Future[Any]"]


class AutoPipelined(Redis):
    """A redis-py asyncio client whose single commands are batched per event-loop turn."""

    def __init__(self, *args: Any, max_batches: int = MAX_BATCHES, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: deque[Waiting] = deque()
        self._in_flight = 0
        self._max_batches = max_batches
        self._scheduled = False
        self._batches: set[asyncio.Task[None]] = set()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = args[0]
        if (name.decode() if isinstance(name, bytes) else str(name)).upper() in BLOCKING:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((args, options, reply))
        self._schedule()
        return await reply

    def _schedule(self) -> None:
        if not self._scheduled and self._in_flight < self._max_batches:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_batch)

    def _send_batch(self) -> None:
        self._scheduled = False
        if not self._waiting or self._in_flight >= self._max_batches:
            return
        batch = list(self._waiting)
        self._waiting.clear()
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._round_trip(batch))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _round_trip(self, batch: list[Waiting]) -> None:
        pool = self.connection_pool
        try:
            conn = await _borrow(pool)
        except Exception as exc:
            self._finished(batch, exc)
            return
        bound_s = conn.socket_timeout
        conn.socket_timeout = None  # one timer for the batch below, not one per reply
        try:
            async with asyncio.timeout(bound_s):
                await conn.send_packed_command(conn.pack_commands([args for args, _, _ in batch]))
                await self._read_replies(conn, batch)
        except BaseException as exc:
            await conn.disconnect()
            self._finished(batch, _as_redis_error(exc, bound_s))
            if not isinstance(exc, Exception):
                raise
        else:
            self._finished(batch, None)
        finally:
            conn.socket_timeout = bound_s
            await pool.release(conn)

    async def _read_replies(self, conn: AbstractConnection, batch: list[Waiting]) -> None:
        for args, options, reply in batch:
            try:
                value = await self.parse_response(cast(Connection, conn), args[0], **options)
            except ResponseError as exc:  # an error reply ends this command only
                if not reply.done():
                    reply.set_exception(exc)
                continue
            if not reply.done():  # its caller may have been cancelled meanwhile
                reply.set_result(value)

    def _finished(self, batch: list[Waiting], error: Exception | None) -> None:
        self._in_flight -= 1
        if error is not None:
            for _, _, reply in batch:
                if not reply.done():
                    reply.set_exception(error)
        if self._waiting:
            self._schedule()

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self._batches:
            await asyncio.gather(*self._batches, return_exceptions=True)
        await super().aclose(close_connection_pool)


def _as_redis_error(exc: BaseException, bound_s: float | None) -> Exception:
    """What the batch's callers get for what ended it: a lapsed bound as redis-py's own
    TimeoutError (what the per-reply socket timeout raised), a cancellation as a lost
    connection."""
    if isinstance(exc, TimeoutError):
        return RedisTimeoutError(f"no reply within the socket timeout ({bound_s} s)")
    return exc if isinstance(exc, Exception) else ConnectionError(str(exc))


async def _borrow(pool: Any) -> AbstractConnection:
    try:
        conn: AbstractConnection = await pool.get_connection()
    except TypeError:  # redis-py < 5.3 requires a command name
        conn = await pool.get_connection("PIPELINE")
    return conn


def handler_client(client: Any) -> Any:
    """The client handlers get (`ctx.redis`), sharing `client`'s connections: batched for a
    plain server; on a cluster, `client` itself (a cluster client routes and pipelines by slot)."""
    if isinstance(client, Redis):
        return AutoPipelined(connection_pool=client.connection_pool)
    return client
