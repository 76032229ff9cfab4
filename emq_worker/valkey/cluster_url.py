"""A cluster URL: `redis+cluster://[user:pass@]host:port[,host:port...][?option=value]`
(`rediss+cluster://` for TLS), parsed with an error that names the offending part."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, parse_qsl, unquote

from emq_worker.errors import ConfigError

CLUSTER_SCHEMES: Final = ("redis+cluster", "rediss+cluster")
_OPTIONS: Final = {"socket_timeout", "socket_connect_timeout", "client_name"}


@dataclass(frozen=True, slots=True)
class ClusterAddress:
    """A parsed cluster URL."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool
    options: dict[str, str]


def parse_cluster_url(parts: SplitResult) -> ClusterAddress:
    """`redis+cluster://[user:pass@]host:port[,host:port...][?client_name=x]`, split by
    urls.split_url (RedisAddress.parse calls this); every error names the offending part (never
    the password)."""
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
