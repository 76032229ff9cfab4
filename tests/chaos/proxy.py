"""A small asyncio TCP proxy on loopback, between workers and redis-server, that injects network
faults per direction: pass, partition (hold every byte until the heal, as TCP retransmission
would deliver them), blackhole (drop every byte), reset (close every connection and refuse new
ones, or reset the next N during their handshake), latency (a delay with jitter, order kept),
and lost replies (forward a request that matches, then drop its reply and close the connection,
a bounded number of times).

It runs as tasks of the caller's event loop; `async with Proxy(port) as proxy:` listens on
`proxy.url` and closes everything on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

READ_SIZE = 65536
PASS, HOLD, DROP = "pass", "hold", "drop"


@dataclass(slots=True, eq=False)
class Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    drop_next_reply: bool = False

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.transport.abort()


class Proxy:
    def __init__(self, target_port: int, *, rng: random.Random | None = None) -> None:
        self.target_port = target_port
        self.rng = rng or random.Random(7)
        self.mode = PASS
        self.delay_s = 0.0
        self.jitter_s = 0.0
        self.refuse = False
        self.lose_reply_if: Callable[[bytes], bool] | None = None
        self.replies_to_lose = 0
        self.lose_rate = 1.0
        self.lose_again = True
        self.lost_requests: set[bytes] = set()
        self.replies_lost = 0
        self.resets_left = 0
        self.resets = 0
        self.links: set[Link] = set()
        self._healed = asyncio.Event()
        self._healed.set()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [task for link in self.links for task in link.tasks]
        for link in list(self.links):
            link.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # --- faults -------------------------------------------------------------------------------

    def partition(self) -> None:
        """Hold every byte both ways (new connections too) until `heal`."""
        self.mode = HOLD
        self._healed.clear()

    def blackhole(self) -> None:
        """Drop every byte both ways until `heal`."""
        self.mode = DROP

    def heal(self) -> None:
        self.mode = PASS
        self.refuse = False
        self._healed.set()

    def reset(self, *, refuse: bool = False) -> int:
        """Abort every open connection (RST); with `refuse`, also close new ones until `heal`."""
        self.refuse = refuse
        links = list(self.links)
        for link in links:
            link.close()
        return len(links)

    def reset_first(self, count: int) -> None:
        """Reset each of the next `count` connections once its client has sent its first bytes
        (the handshake's HELLO): a drop during the handshake, not a refused connect."""
        self.resets_left = count

    def latency(self, delay_s: float, jitter_s: float = 0.0) -> None:
        """Delay every chunk by delay_s +/- jitter_s (uniform), keeping order per direction."""
        self.delay_s, self.jitter_s = delay_s, jitter_s

    def lose_replies(
        self, matches: Callable[[bytes], bool], count: int, rate: float = 1.0, *, again: bool = True
    ) -> None:
        """Forward requests that `matches`; drop the reply of each with probability `rate` and
        close its connection, until `count` replies are lost. Without `again`, a request sent
        again byte for byte (a re-send) always gets its reply."""
        self.lose_reply_if, self.replies_to_lose, self.lose_rate = matches, count, rate
        self.lose_again = again

    # --- plumbing -----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            writer.transport.abort()
            return
        await self._healed.wait()  # a connect during a partition hangs like a lost SYN
        if self.resets_left > 0:
            self.resets_left -= 1
            with contextlib.suppress(ConnectionError, OSError):
                await reader.read(READ_SIZE)
            self.resets += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        link = Link(writer, up_writer)
        self.links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, up_writer, upstream=True)),
            asyncio.create_task(self._pump(link, up_reader, writer, upstream=False)),
        ]

    async def _pump(
        self,
        link: Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        """Read chunks and queue them with their delivery time; a second task writes them in
        order when due, so a delay shifts the stream without stretching it."""
        due: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        deliver = asyncio.create_task(self._deliver(link, due, writer))
        link.tasks.append(deliver)
        try:
            while True:
                chunk = await reader.read(READ_SIZE)
                if not chunk:
                    break
                if self.mode == DROP:
                    continue
                if self.mode == HOLD:
                    await self._healed.wait()
                if upstream and self._should_lose_reply(chunk):
                    link.drop_next_reply = True
                elif not upstream and link.drop_next_reply:
                    self.replies_lost += 1
                    break  # the reply is dropped and the connection dies
                jitter = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.delay_s else 0.0
                due.put_nowait((time.monotonic() + max(0.0, self.delay_s + jitter), chunk))
        except (ConnectionError, OSError):
            pass
        finally:
            due.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError):
                await deliver
            link.close()
            self.links.discard(link)

    async def _deliver(
        self,
        link: Link,
        due: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
    ) -> None:
        last = 0.0
        try:
            while (item := await due.get()) is not None:
                at, chunk = item
                last = max(last, at)  # order is kept: a chunk never overtakes an earlier one
                await asyncio.sleep(max(0.0, last - time.monotonic()))
                if self.mode == HOLD:
                    await self._healed.wait()
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            link.close()

    def _should_lose_reply(self, chunk: bytes) -> bool:
        if self.replies_to_lose <= 0 or self.lose_reply_if is None:
            return False
        if not self.lose_reply_if(chunk) or self.rng.random() >= self.lose_rate:
            return False
        if not self.lose_again:
            if chunk in self.lost_requests:
                return False
            self.lost_requests.add(chunk)
        self.replies_to_lose -= 1
        return True
