"""What the dashboard is told to do: where to bind, whether actions are allowed, the token.

Pure: no I/O, no Starlette. The rule that matters: actions on an address beyond loopback need a
token, because anyone who can reach the port could otherwise retry, purge or cancel jobs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from emq_worker.errors import ConfigError
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import DEFAULT_TIMEOUT_S, check_socket_timeout, validate_url

LOOPBACK_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_BIND = f"{LOOPBACK_HOST}:{DEFAULT_PORT}"
TOKEN_VARIABLE = "EMQ_DASHBOARD_TOKEN"
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True, slots=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def parse_bind(value: str) -> Bind:
    """`HOST:PORT` or `[IPv6]:PORT`; port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--bind must be HOST:PORT (e.g. {DEFAULT_BIND}); got {value!r}")
    return Bind(host, int(port))


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    redis_url: str
    bind: Bind = Bind(LOOPBACK_HOST, DEFAULT_PORT)
    wire_version: str = DEFAULT_WIRE_VERSION
    allow_actions: bool = False
    token: str | None = None
    """When set, every page asks for it (a login form, or `Authorization: Bearer`)."""
    poll_ms: int = 1000
    """How often the pages refresh their live parts."""
    socket_timeout_s: float = DEFAULT_TIMEOUT_S
    """How long a read waits for the server's reply: a frozen server fails a page (503)."""

    def __post_init__(self) -> None:
        validate_url(self.redis_url)
        check_socket_timeout(self.socket_timeout_s)
        if self.allow_actions and not self.bind.loopback and not self.token:
            raise ConfigError(
                f"--allow-actions on {self.bind}, beyond loopback, needs a token: set "
                f"{TOKEN_VARIABLE} (at least {MIN_TOKEN_LENGTH} characters), or bind to "
                "127.0.0.1"
            )
        if self.token is not None and len(self.token) < MIN_TOKEN_LENGTH:
            raise ConfigError(
                f"{TOKEN_VARIABLE} must be at least {MIN_TOKEN_LENGTH} characters; "
                f"got {len(self.token)}"
            )
        if self.poll_ms < 100:
            raise ConfigError(f"poll_ms must be at least 100; got {self.poll_ms}")
