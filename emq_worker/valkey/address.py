"""The parts of a single-server Redis URL that redis-py would otherwise reject with a traceback
(a port that is not a number or out of range) or silently ignore (a database that is not a
number runs on db 0). Each error names the part and its value, never the password."""

from __future__ import annotations

from urllib.parse import parse_qs

from emq_worker.errors import ConfigError
from emq_worker.valkey.urls import split_url


def check_url_parts(url: str) -> None:
    """Raise ConfigError for a bad port or database in a redis://, rediss:// or unix:// URL."""
    parts = split_url(url)
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
