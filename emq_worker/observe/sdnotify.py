"""The systemd notify protocol, spoken directly on `$NOTIFY_SOCKET` (no libsystemd).

Under `Type=notify` systemd hands the service the path of a datagram unix socket in
`NOTIFY_SOCKET` (a leading `@` names the Linux abstract namespace). Each message is one datagram
of newline-separated `VAR=value` lines: `READY=1` once the worker serves, `STATUS=...` free text
for `systemctl status`, `WATCHDOG=1` at least every half `WatchdogSec` (systemd passes it as
`WATCHDOG_USEC`, with `WATCHDOG_PID` naming the process it expects the pings from), and
`STOPPING=1` when shutdown begins.

The daemon builds a `Notifier` from its environment and hands it to the Worker; library code only
calls it. Without `NOTIFY_SOCKET` every call is a no-op. A send never raises into the worker: the
first failure is logged, later ones are dropped quietly (a full socket drops a ping; the next
one goes out on the next beat).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from emq_worker.observe.clock import Clock, MonotonicClock
from emq_worker.observe.log import get_logger

WATCHDOG_PINGS_PER_INTERVAL = 4
"""Pings per watchdog interval at most: systemd asks for one every half interval; a quarter
leaves room for a slow beat."""


def socket_address(value: str) -> bytes | None:
    """The `sockaddr_un` path for a `NOTIFY_SOCKET` value, or None for an unusable one."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return os.fsencode(value)
    return None


def watchdog_interval_s(environ: Mapping[str, str], pid: int) -> float | None:
    """`WATCHDOG_USEC` in seconds when the watchdog is on for process `pid`, else None."""
    usec = environ.get("WATCHDOG_USEC", "")
    owner = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None
    return int(usec) / 1_000_000


class Notifier:
    """Sends notify messages to one socket address; a Notifier without an address does nothing."""

    def __init__(
        self,
        address: bytes | None = None,
        *,
        watchdog_s: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.address = address
        self.watchdog_s = watchdog_s
        self._clock = clock or MonotonicClock()
        self._socket: socket.socket | None = None
        self._failed = False
        self._stopping = False
        self._last_ping: float | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, pid: int | None = None) -> Notifier:
        """The notifier systemd asked for through `environ` (`NOTIFY_SOCKET`, `WATCHDOG_*`)."""
        raw = environ.get("NOTIFY_SOCKET", "")
        if not raw:
            return cls()
        address = socket_address(raw)
        if address is None:
            get_logger().warning("sd_notify_unsupported_socket", notify_socket=raw)
            return cls()
        return cls(
            address, watchdog_s=watchdog_interval_s(environ, os.getpid() if pid is None else pid)
        )

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def ping_every_s(self) -> float | None:
        """How often the watchdog wants a ping from the beat; None: it does not."""
        if self.watchdog_s is None or not self.enabled:
            return None
        return self.watchdog_s / WATCHDOG_PINGS_PER_INTERVAL

    def ready(self, status: str | None = None) -> None:
        self._send("READY=1", status)

    def status(self, text: str) -> None:
        self._send(None, text)

    def watchdog(self) -> None:
        """Ping the watchdog; cheap to call on every beat pass (rate-limited here)."""
        every = self.ping_every_s
        if every is None:
            return
        now = self._clock.monotonic()
        if self._last_ping is not None and now - self._last_ping < every:
            return
        self._last_ping = now
        self._send("WATCHDOG=1", None)

    def stopping(self, status: str | None = None) -> None:
        """Shutdown has begun; sent once however often it is called."""
        if self._stopping:
            return
        self._stopping = True
        self._send("STOPPING=1", status)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, state: str | None, status: str | None) -> None:
        if self.address is None:
            return
        lines = [state] if state else []
        if status is not None:
            lines.append("STATUS=" + status.replace("\n", " "))
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            self._socket.sendto("\n".join(lines).encode(), self.address)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                get_logger().warning(
                    "sd_notify_failed",
                    error=str(exc),
                    notify_socket=os.fsdecode(self.address).replace("\0", "@", 1),
                )
