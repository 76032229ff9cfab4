"""Servers that are not Redis, on a free port of 127.0.0.1, for tests of what a client does when
the port answers wrongly: `silent` accepts every connection and never sends a byte (a frozen
server, a service waiting for its own protocol); `http` answers anything with `HTTP/1.1 400`."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from typing import Literal

Mode = Literal["silent", "http"]
HTTP_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
POLL_S = 0.05


class NotRedis:
    """`with NotRedis("silent") as server: ... server.url`; stopped (every socket closed) on
    exit. Connections it accepted are counted in `accepted`."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.accepted = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._held: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(POLL_S):
                    if key.fileobj is self._listener:
                        conn, _ = self._listener.accept()
                        self.accepted += 1
                        self._held.append(conn)  # silent: held open, never answered
                        if self.mode == "http":
                            selector.register(conn, selectors.EVENT_READ)
                    else:
                        self._answer(selector, key.fileobj)  # type: ignore[arg-type]

    def _answer(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(HTTP_400)
        conn.close()

    def __enter__(self) -> NotRedis:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._listener.close()
