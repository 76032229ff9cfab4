"""Where the server is: a Redis URL parsed and checked once, where it enters (the CLI's
--redis-url, `Producer.from_url`, `WorkerSettings`), then passed down as a `RedisAddress`.

The checks catch what redis-py would otherwise reject with a traceback (a port that is not a
number or out of range) or silently ignore (a database that is not a number runs on db 0), and a
cluster URL's seeds and options (cluster_url.py). Each error names the part, its value and the
URL it came from, never the password.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, parse_qs

from emq_worker.errors import ConfigError
from emq_worker.valkey.cluster_url import CLUSTER_SCHEMES, ClusterAddress, parse_cluster_url
from emq_worker.valkey.urls import split_url

SCHEMES: Final = ("redis", "rediss", "unix")
"""The schemes of a single server; a cluster's are cluster_url.CLUSTER_SCHEMES."""
DEFAULT_PORT: Final = 6379


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """A checked Redis URL and what the code below the edge reads from it."""

    url: str
    """As given, password included: what a client connects with. Messages print `redacted`."""
    scheme: str
    redacted: str
    """The URL with any password replaced by `***`."""
    where: str
    """The server in a message: `host:port`, `the socket /path` or the cluster's seeds."""
    host: str | None
    """A single server's host name or address over TCP; None for a unix socket or a cluster."""
    port: int
    """A single server's TCP port (6379 when the URL names none)."""
    cluster: ClusterAddress | None
    """A cluster URL's seeds, credentials and options; None for a single server."""

    @classmethod
    def parse(cls, url: str) -> RedisAddress:
        """The address of `url`, or ConfigError naming the offending part and the URL."""
        parts = split_url(url)
        hidden = _redacted(parts, url)
        if parts.scheme not in SCHEMES + CLUSTER_SCHEMES:
            raise ConfigError(
                f"redis URL scheme must be one of {', '.join(SCHEMES + CLUSTER_SCHEMES)}; "
                f"got {parts.scheme or '(none)'!r} in {hidden!r}"
            )
        try:
            if parts.scheme in CLUSTER_SCHEMES:
                cluster = parse_cluster_url(parts)
                seeds = ", ".join(f"{host}:{port}" for host, port in cluster.seeds)
                where = f"the cluster's seed node(s) {seeds}"
                return cls(url, parts.scheme, hidden, where, None, DEFAULT_PORT, cluster)
            _check_parts(parts)
        except ConfigError as exc:
            raise ConfigError(f"{exc} in {hidden!r}") from None
        if parts.scheme == "unix":
            return cls(url, "unix", hidden, f"the socket {parts.path}", None, DEFAULT_PORT, None)
        port = parts.port or DEFAULT_PORT
        return cls(
            url, parts.scheme, hidden, f"{parts.hostname}:{port}", parts.hostname, port, None
        )


def address_of(url: str | RedisAddress) -> RedisAddress:
    """`url` parsed, or the address itself when it was parsed already."""
    return url if isinstance(url, RedisAddress) else RedisAddress.parse(url)


def redacted(url: str | RedisAddress) -> str:
    """The URL with any password replaced by `***`, for messages and logs (an unparsable URL
    too: it may be the one an error is about)."""
    if isinstance(url, RedisAddress):
        return url.redacted
    return _redacted(split_url(url), url)


def _redacted(parts: SplitResult, url: str) -> str:
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def _check_parts(parts: SplitResult) -> None:
    """A bad port or database of a redis://, rediss:// or unix:// URL."""
    if parts.scheme != "unix":
        _check_port(parts.netloc.rpartition("@")[2])
        path_db = parts.path.lstrip("/")
        if path_db:
            _check_db(path_db)
    for db in parse_qs(parts.query).get("db", []):
        _check_db(db)


def _check_port(host_port: str) -> None:
    if host_port.startswith("["):  # an IPv6 literal: the port follows the bracket
        host_port = host_port.partition("]")[2]
    _, sep, port = host_port.rpartition(":")
    if not sep:
        return  # no port: redis-py uses 6379
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"port must be an integer in 1-65535; got {port!r}")


def _check_db(db: str) -> None:
    if not db.isdigit():
        raise ConfigError(f"database must be an integer >= 0; got {db!r}")
