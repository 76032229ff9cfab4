"""The notify socket the parent binds for one child: the child speaks sd_notify to it as it would
to systemd (READY=1, WATCHDOG=1 from its beat, STATUS=, STOPPING=1), and the parent reads it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

DATAGRAM_BYTES = 4096


class NotifyChannel:
    """A datagram unix socket at `<directory>/<index>.sock`; `address` is its NOTIFY_SOCKET."""

    def __init__(self, directory: Path, index: int) -> None:
        self.path = directory / f"{index}.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.setblocking(False)

    @property
    def address(self) -> str:
        return str(self.path)

    async def receive(self) -> list[str]:
        """The lines of the next message."""
        data = await asyncio.get_running_loop().sock_recv(self.sock, DATAGRAM_BYTES)
        return data.decode("utf-8", "replace").split("\n")

    def drain(self) -> None:
        """Drop what is queued: a replaced child's last words must not count for the next one."""
        while True:
            try:
                self.sock.recv(DATAGRAM_BYTES)
            except BlockingIOError:
                return

    def close(self) -> None:
        self.sock.close()
