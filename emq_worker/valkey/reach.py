"""Start-up: reach the server, retrying a dropped or refused connection for a bounded time, and
say why when it gives up.

A connection dropped during the handshake (a proxy or load balancer starting up, `maxclients`, a
`CLIENT KILL`), refused (Redis still starting) or timed out may lift by itself: the first
connection is retried with redis-py's `Retry` and capped, jittered exponential backoff (0.1 s
doubling to 2 s) for `connect_wait_ms`. What cannot lift stops at once: refused credentials (exit
3), a refused ACL permission (exit 4), a version fence mismatch, a TLS certificate error, and a
TLS mix-up the port itself proves: a `redis://` URL to a port that answers a TLS handshake, or a
`rediss://` URL to a port that answers a plaintext PING. The message names what was seen; it says
TLS only when such a probe showed it, never because a connection was merely closed.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterator

import anyio
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from structlog.typing import FilteringBoundLogger

from emq_worker.errors import ServerTimeoutError, ServerUnreachableError
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.connection import DEFAULT_TIMEOUT_S
from emq_worker.valkey.failures import describe, fatal, preflight

STARTUP_BACKOFF = ExponentialWithJitterBackoff(base=0.1, cap=2.0)
PROBE_S = 2.0
"""How long a TLS or plaintext probe of the port may take."""


UNANSWERED: tuple[type[RedisError], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    InvalidResponse,
)
"""What a call meets when the server cannot be reached or does not speak RESP."""


def unanswered(
    address: RedisAddress, exc: RedisError, reason: str | None = None
) -> ServerUnreachableError:
    """One line naming the server and what was seen (`reason`: a probe's finding, if any)."""
    kind = ServerTimeoutError if isinstance(exc, RedisTimeoutError) else ServerUnreachableError
    why = reason or cause_of(exc, address)
    return kind(f"Redis at {address.redacted}: {describe(exc)} ({why})")


@contextlib.contextmanager
def naming_server(address: RedisAddress) -> Iterator[None]:
    """Within it, a call the server did not answer is raised as ServerUnreachableError (or
    ServerTimeoutError) naming the server; refused credentials and permissions pass unchanged."""
    try:
        yield
    except UNANSWERED as exc:
        if fatal(exc) or isinstance(exc, ServerUnreachableError):
            raise
        raise unanswered(address, exc) from exc


@contextlib.asynccontextmanager
async def explaining(address: RedisAddress) -> AsyncIterator[None]:
    """naming_server for a command-line client: the port is probed for a TLS mix-up first
    (`explain`), as the worker's start-up does."""
    try:
        yield
    except UNANSWERED as exc:
        if fatal(exc):
            raise
        seen = exc.__cause__ if isinstance(exc, ServerUnreachableError) else exc
        if not isinstance(seen, RedisError):
            raise
        raise unanswered(address, seen, await port_mismatch(address, seen)) from seen


class _Attempts:
    """Counts the failed attempts, logs each, and stops the retry when the wait is over or the
    failure cannot lift by itself."""

    def __init__(self, address: RedisAddress, wait_s: float, log: FilteringBoundLogger) -> None:
        self.address = address
        self.deadline = time.monotonic() + wait_s
        self.log = log
        self.count = 0
        self.began = time.monotonic()
        self.mismatch: str | None = None
        self.probed = False

    async def failed(self, error: Exception) -> None:
        self.count += 1
        if fatal(error) or _tls_error(error):
            raise error
        if not self.probed and _probe_worthy(error):
            self.probed = True  # once: the port's answer does not change between attempts
            self.mismatch = await port_mismatch(self.address, error)
        if self.mismatch is not None or time.monotonic() >= self.deadline:
            raise error
        self.log.warning(
            "redis_unreachable",
            url=self.address.redacted,
            attempt=self.count,
            error=describe(error),
            cause=cause_of(error, self.address),
            gives_up_in_s=round(self.deadline - time.monotonic(), 1),
        )


async def reach(
    address: RedisAddress,
    wire_version: str,
    log: FilteringBoundLogger,
    wait_s: float,
    socket_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """`failures.preflight` (one fenced connection, the eviction-policy check), retried while
    the connection is dropped, refused or timed out, for at most about `wait_s` seconds; each
    attempt waits at most `socket_timeout_s` for a reply."""
    attempts = _Attempts(address, wait_s, log)
    retry = Retry(STARTUP_BACKOFF, -1, (RedisConnectionError, RedisTimeoutError))
    try:
        await retry.call_with_retry(
            lambda: preflight(address, wire_version, log, socket_timeout_s), attempts.failed
        )
    except (RedisConnectionError, RedisTimeoutError) as exc:
        if fatal(exc):
            raise
        raise unreachable(address, exc, attempts) from exc
    if attempts.count:
        log.info("redis_reached", url=address.redacted, after_attempts=attempts.count + 1)


def unreachable(
    address: RedisAddress, exc: RedisError, attempts: _Attempts
) -> ServerUnreachableError:
    seconds = time.monotonic() - attempts.began
    reason = attempts.mismatch or cause_of(exc, address)
    return ServerUnreachableError(
        f"Redis at {address.redacted}: {describe(exc)} ({reason}); "
        f"gave up after {attempts.count} attempt(s) in {seconds:.1f} s"
    )


async def explain(address: RedisAddress, exc: RedisError) -> str:
    """One line for a connection that failed once (a command-line client): what was seen, and a
    TLS hint only when a probe of the port shows a mix-up."""
    reason = await port_mismatch(address, exc) or cause_of(exc, address)
    return f"Redis at {address.redacted}: {describe(exc)} ({reason})"


def cause_of(exc: BaseException, address: RedisAddress) -> str:
    """What a connection failure means, from what was seen (never a guess about TLS)."""
    where = address.where
    text = str(exc)
    if _tls_error(exc):
        return f"the TLS handshake with {where} failed: check ssl_ca_certs and the host name"
    if isinstance(exc, InvalidResponse):
        return (
            f"{where} does not speak the Redis protocol (it answered {_first_byte(text)}: "
            "an HTTP server or another service on that port?)"
        )
    if isinstance(exc, RedisTimeoutError):
        if "connecting" in text:
            return f"{where} did not accept a connection in time (a firewall dropping packets?)"
        return (
            f"{where} accepted the connection but did not answer in time: a frozen or "
            "overloaded server, or another service on that port"
        )
    if _refused(text):
        return f"nothing accepts connections at {where}: is Redis running there?"
    if "closed" in text or "reset" in text or "Broken pipe" in text:
        return (
            f"{where} dropped the connection during the handshake: the server or a proxy "
            "or firewall on the way closed it (maxclients, CLIENT KILL, a restart)"
        )
    return f"could not talk to {where}"


async def port_mismatch(address: RedisAddress, exc: BaseException) -> str | None:
    """A TLS hint when the port proves a mix-up: a plaintext URL whose connection was dropped
    or timed out, to a port that completes a TLS handshake; a `rediss://` URL whose handshake
    failed, to a port that answers a plaintext PING. None otherwise (or for a unix socket)."""
    if not _probe_worthy(exc):
        return None
    scheme, host, port = address.scheme, address.host, address.port
    if scheme not in ("redis", "rediss") or not host:
        return None
    # A TLS port fails a plaintext client's first bytes at once (they are no TLS record): a
    # plaintext call that timed out met a silent server, not TLS, and needs no probe.
    silent = isinstance(exc, RedisTimeoutError)
    if scheme == "redis" and not silent and await _speaks_tls(host, port):
        return "the port answered a TLS handshake: it is a TLS port, use rediss://"
    if scheme == "rediss" and await _speaks_plaintext(host, port):
        return (
            "no TLS handshake answered, but a plaintext PING did: is this port plaintext? "
            "use redis:// for it"
        )
    return None


async def _speaks_tls(host: str, port: int) -> bool:
    """True when the port completes a TLS handshake, or refuses it with a TLS alert (e.g. a
    client certificate required): only a TLS server does either."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a probe: which CA signed it does not matter here
    try:
        with anyio.fail_after(PROBE_S):
            stream = await anyio.connect_tcp(
                host, port, ssl_context=context, tls_standard_compatible=False
            )
    except ssl.SSLError as exc:
        # A connection closed or reset mid-handshake is no answer at all: depending on the
        # Python and OpenSSL build it surfaces as EOF (SSLEOFError) or as a clean close
        # (SSLZeroReturnError, Debian's Python 3.11), never as a TLS server's alert.
        closed = isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError)
        return not closed and exc.reason != "WRONG_VERSION_NUMBER"
    except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream):
        return False
    with contextlib.suppress(OSError, anyio.BrokenResourceError):
        await stream.aclose()  # the handshake completed: the answer is in
    return True


async def _speaks_plaintext(host: str, port: int) -> bool:
    """True when the port answers `PING` with a RESP reply (+PONG, or an error such as NOAUTH)."""
    try:
        with anyio.fail_after(PROBE_S):
            stream = await anyio.connect_tcp(host, port)
            try:
                await stream.send(b"PING\r\n")
                reply = await stream.receive(64)
            finally:
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await stream.aclose()
    except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream):
        return False
    return reply[:1] in (b"+", b"-")


def _probe_worthy(exc: BaseException) -> bool:
    """A dropped or timed-out connection (not a refused one, nor a TLS error already named)."""
    if not isinstance(exc, RedisConnectionError | RedisTimeoutError) or _tls_error(exc):
        return False
    return not _refused(str(exc))


def _refused(text: str) -> bool:
    return "refused" in text or "Connect call failed" in text or "Error 111" in text


def _tls_error(exc: BaseException) -> bool:
    """A TLS failure (a certificate the CA does not sign, a host-name mismatch): never lifts."""
    return "SSL" in str(exc) or isinstance(exc.__cause__ or exc.__context__, ssl.SSLError)


def _first_byte(text: str) -> str:
    """`"H"` from redis-py's `Protocol error, got "H" as reply type byte`."""
    _, quote, rest = text.partition('got "')
    return f'"{rest.partition(chr(34))[0]}"' if quote else "something else"
