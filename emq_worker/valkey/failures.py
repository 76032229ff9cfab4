"""How the worker reads what the server refuses, and what it checks about the server at start.

Some refusals lift by themselves or by an operator's hand while the worker keeps running: out of
memory (`OOM`), a failed background save (`MISCONF`), a demoted primary (`READONLY`), a busy script,
a blocking call ended by a role change (`UNBLOCKED`), a key of the wrong type an operator will fix.
The worker backs off and retries those, as it does a dropped connection, and never spins. Others
never lift without a new deployment: a wrong password (`WRONGPASS`, `NOAUTH`) and a missing ACL
permission (`NOPERM`) stop the worker with their own exit codes.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    NoPermissionError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from structlog.typing import FilteringBoundLogger

from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.cluster import ClusterUnavailableError
from emq_worker.valkey.connection import connect

RETRYABLE: tuple[type[RedisError], ...] = (RedisConnectionError, RedisTimeoutError, ResponseError)
"""What a loop that talks to Redis catches; `fatal()` picks out what it must re-raise."""

EXIT_AUTH = 3
"""The server refused the credentials (WRONGPASS, NOAUTH)."""
EXIT_NOPERM = 4
"""The ACL user lacks a command or key pattern the worker needs (NOPERM)."""

EVICTION_SAFE_POLICY = "noeviction"


def fatal(exc: BaseException) -> bool:
    """True for refusals that no retry can cure: credentials and ACL permissions."""
    return isinstance(exc, AuthenticationError | AuthorizationError | NoPermissionError)


SERVER_WIDE_CODES = frozenset(
    {"OOM", "READONLY", "MISCONF", "BUSY", "UNBLOCKED", "LOADING", "MASTERDOWN", "NOREPLICAS"}
)
"""Refusals about the whole server: every queue would meet them, so the whole beat backs off."""


def queue_scoped(exc: BaseException) -> bool:
    """True for a failure that belongs to the one queue whose keys were touched: a cluster node
    (the queue's slot) unreachable, or a refusal about a key (WRONGTYPE, a script error on a
    corrupt row). A lost connection to a single server, or a server-wide refusal (OOM, READONLY,
    ...) is not: every queue would fail alike, so the whole beat backs off as one."""
    if isinstance(exc, ClusterUnavailableError):
        return True
    if not isinstance(exc, ResponseError) or fatal(exc):
        return False
    return _status_code(exc) not in SERVER_WIDE_CODES


def exit_code_for(exc: BaseException) -> int | None:
    """The documented exit code for a fatal refusal, else None (the caller's generic code).
    The cause is looked at too: a NOPERM on SCRIPT LOAD arrives wrapped in a ScriptError."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:  # a chain may loop back on itself
        if isinstance(cause, AuthenticationError):
            return EXIT_AUTH
        if isinstance(cause, NoPermissionError | AuthorizationError):
            return EXIT_NOPERM
        seen.add(id(cause))
        cause = cause.__cause__
    return None


_HINTS = {
    "OOM": "Redis is out of memory (maxmemory reached); free memory or raise maxmemory",
    "READONLY": "Redis is a read-only replica; point the worker at the primary",
    "MISCONF": "Redis refuses writes after a failed background save; fix its disk",
    "NOPERM": "the ACL user lacks a permission the worker needs (see docs/how-to/secure.md)",
    "WRONGPASS": "Redis refused the user name or password",
    "NOAUTH": "Redis requires a password and none was given",
}


def describe(exc: BaseException) -> str:
    """One line naming what the server refused and, for the common ones, what to do about it."""
    code = _status_code(exc)
    text = str(exc)
    if code and not text.startswith(code):
        text = f"{code} {text}"
    hint = _HINTS.get(code or "")
    return f"{text} ({hint})" if hint else text


def _status_code(exc: BaseException) -> str | None:
    code = getattr(exc, "status_code", None)
    if isinstance(code, str) and code:
        return code
    word = str(exc).partition(" ")[0]
    return word if word.isupper() and word.isalpha() else None


async def warn_about_eviction(client: Redis, log: FilteringBoundLogger) -> str | None:
    """Warn when the server may evict keys: an evicted job row or lease is a lost job.

    Returns the policy read, or None when the server would not say (an ACL user without CONFIG
    is the least-privilege norm; then it is logged that nothing could be checked)."""
    try:
        reply = await client.config_get("maxmemory-policy")
    except ResponseError as exc:
        log.info("server_check_skipped", check="maxmemory-policy", reason=describe(exc))
        return None
    named = {_decoded(key): _decoded(value) for key, value in dict(reply).items()}
    policy = named.get("maxmemory-policy")
    if policy is None:
        log.info("server_check_skipped", check="maxmemory-policy", reason="not reported")
        return None
    if policy != EVICTION_SAFE_POLICY:
        log.warning(
            "maxmemory_policy_unsafe",
            policy=policy,
            reason="the server may evict job rows and leases under memory pressure, losing "
            f"jobs; set maxmemory-policy {EVICTION_SAFE_POLICY}",
        )
    return policy


def _decoded(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def preflight(
    address: RedisAddress, wire_version: str, log: FilteringBoundLogger, socket_timeout_s: float
) -> None:
    """Before the worker starts: one fenced connection (so a wrong password or version stops it
    here, with its own exit code) and the eviction-policy warning, each reply waited for at most
    `socket_timeout_s`."""
    client = connect(address, wire_version, socket_timeout_s=socket_timeout_s)
    try:
        await warn_about_eviction(client, log)
    finally:
        await client.aclose()
