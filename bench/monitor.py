"""A MONITOR tap: every command the server runs, as (time, client, command, first argument).

Commands a Lua script runs are tagged `lua` instead of a client address; everything else is a
top-level command some client sent. MONITOR slows the server down, so the bench uses it only in
short windows of their own, never while it times a drain.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass

_LINE = re.compile(rb'^\+(\d+\.\d+) \[\d+ ([^\]]+)\] "([^"]*)"(?: "([^"]*)")?')
HEAD_BYTES = 200


@dataclass(frozen=True, slots=True)
class Seen:
    at: float
    client: str
    command: str
    arg1: str

    @property
    def from_lua(self) -> bool:
        return self.client == "lua"


class Monitor:
    def __init__(self, port: int) -> None:
        self.seen: list[Seen] = []
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.sendall(b"MONITOR\r\n")
        self._stream = self._sock.makefile("rb")
        first = self._stream.readline()
        if not first.startswith(b"+OK"):
            raise RuntimeError(f"MONITOR refused: {first!r}")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._stream:
                match = _LINE.match(line[:HEAD_BYTES])
                if match is None:
                    continue
                at, client, command, arg1 = match.groups()
                command_name = command.decode().lower()
                first = (arg1 or b"").decode()
                self.seen.append(Seen(float(at), client.decode(), command_name, first))
        except (OSError, ValueError):
            return

    def stop(self) -> list[Seen]:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)
        self._sock.close()
        return self.seen

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
