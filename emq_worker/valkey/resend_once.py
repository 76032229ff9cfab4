"""Which commands a client re-sends after a lost connection, and how: redis-py's own retry.

Every pooled connection carries a `ResendOnce` (redis-py's `Retry` object, which the client runs
around each command and pipeline on that connection). On a `ConnectionError` redis-py closes the
connection and calls again on the same Connection object, which reconnects first, so the re-send
always goes out on a fresh connection (fenced again by the version check). It re-sends only
commands sent inside `resend_once()`: the callers open that scope for the verbs whose scripts make
a second delivery harmless (protocol/scripts.py RESENDABLE; docs/protocol.md section 6 says why
each is safe). Everything else fails at the first lost connection, as before: a blind re-send of a
script that is not idempotent (a job log's RPUSH) would apply it twice.

A dropped *idle* connection costs nothing at all: the pool notices it was closed before taking it
(connection.py turns off the maintenance notices that made redis-py 8 skip that check), so no
command is ever written to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

T = TypeVar("T")

_RESEND: ContextVar[bool] = ContextVar("emq_resend", default=False)


@contextmanager
def resend_once(allowed: bool = True) -> Iterator[None]:
    """Within this block (this task only), a command whose connection was lost is re-sent once
    on a fresh connection; with `allowed` False the block changes nothing."""
    token = _RESEND.set(allowed or _RESEND.get())
    try:
        yield
    finally:
        _RESEND.reset(token)


class ResendOnce(Retry):
    """One immediate re-send on a lost connection, inside `resend_once()` only; outside it,
    exactly what a pool built without a retry does (redis-py's `Retry(NoBackoff(), 0)`).

    Only `ConnectionError` (the server closed or reset the connection, or it could not be
    made): a `TimeoutError` means a server that did not answer in the socket timeout, and a
    second wait as long would only delay the caller's own handling (the beat's backoff, the
    renewal's bound)."""

    def __init__(self) -> None:
        super().__init__(NoBackoff(), 1, (RedisConnectionError,))

    async def call_with_retry(
        self, do: Callable[[], Awaitable[T]], fail: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> T:
        # *args: redis-py 8 passes is_retryable and with_failure_count; redis-py 5 neither.
        if not _RESEND.get():
            return await _NEVER.call_with_retry(do, fail, *args, **kwargs)
        return await super().call_with_retry(do, fail, *args, **kwargs)


_NEVER = Retry(NoBackoff(), 0)
