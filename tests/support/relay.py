"""A TCP relay in front of a server that a test can cut silently, as a dead link does.

While cut, nothing is forwarded and no socket is closed: no reset, no error, the client's calls
just wait. What was written meanwhile is delivered the way the kernel would once packets flow
again: data on an established connection at its next retransmission (200, 400, 800 ms ... after
it was sent), a connection opened during the cut at its next SYN retry (1, 2, 4 s ... after
the dial). So a call stuck in a cut answers late, and a fresh dial during it waits about a
second: what made a short cut cost every lease (network namespaces show the same; this runs
without root and in one process).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

RETRANSMIT_S = (0.2, 0.6, 1.4, 3.0, 6.2)
"""Established connections: a segment is sent again this long after it was first sent."""
SYN_RETRY_S = (1.0, 3.0, 7.0, 15.0)
"""A dial: its SYN is sent again this long after the first."""


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.cut_since: float | None = None
        self.marks: list[float] = []
        """Monotonic times at which client data containing `watch` passed (or was sent)."""
        self.watch: bytes | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._healed = asyncio.Event()
        self._healed.set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def cut(self) -> None:
        self.cut_since = time.monotonic()
        self._healed.clear()

    def heal(self) -> None:
        self.cut_since = None
        self._healed.set()

    async def _after_cut(self, sent_at: float, retries: Sequence[float]) -> None:
        """Return when a packet sent at `sent_at` would get through: at once without a cut,
        else at its first retry that finds the link up."""
        for after in retries:
            if self.cut_since is None or self.cut_since > sent_at:
                return
            await asyncio.sleep(max(0.0, sent_at + after - time.monotonic()))
            if self.cut_since is None:
                return
        await self._healed.wait()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                sent_at = time.monotonic()
                if self.watch is not None and self.watch in data:
                    self.marks.append(sent_at)
                if self.cut_since is not None:
                    await self._after_cut(sent_at, RETRANSMIT_S)
                writer.write(data)
                await writer.drain()
        writer.close()  # (the other side closed: pass it on)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dialled_at = time.monotonic()
        writers = [writer]
        try:
            if self.cut_since is not None:
                await self._after_cut(dialled_at, SYN_RETRY_S)
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            writers.append(up_writer)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except OSError:
            pass
        finally:
            for each in writers:
                each.close()
                with contextlib.suppress(Exception):
                    await asyncio.shield(each.wait_closed())

    def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Relay]:
        self._server = await asyncio.start_server(self._track, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
