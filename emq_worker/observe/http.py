"""The worker's optional HTTP endpoint (`--http HOST:PORT`), served by asyncio's own server:

- `/metrics`: Prometheus text from the `exposition` collector; queue depths are read from Redis
  per scrape.
- `/healthz`: 200 while the beat ran within the last BEATS_FRESH beats (or the worker drains).
- `/readyz`: 200 when scripts are loaded, Redis answers a PING and the worker is not stopping.

One GET per connection: the request line is parsed, headers are skipped, the reply carries a
Content-Length and the connection is closed. `emq-worker health` (cli/) probes `/healthz`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.errors import ConfigError, EmqError
from emq_worker.observe.exposition import Exposition
from emq_worker.observe.log import get_logger
from emq_worker.protocol.lane_verbs import LanesView, read_lanes
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import Counts

BEATS_FRESH = 3
"""/healthz fails once the beat has not run for this many beats."""
READ_TIMEOUT_S = 5.0
PING_TIMEOUT_S = 1.0
TEXT = "text/plain; charset=utf-8"
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
REASONS[503] = "Service Unavailable"


class HttpBindError(EmqError):
    """`--http HOST:PORT` cannot be served: the port is taken, or the address is not ours."""


def parse_host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as (host, port); port 0 asks for any free port."""
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"http must be HOST:PORT, e.g. 127.0.0.1:9464; got {value!r}")
    return host, int(port)


def beat_stale(last_beat: float | None, now: float, beat_s: float, grace_s: float) -> str | None:
    """Why the beat is not alive (None when it ran within the last BEATS_FRESH beats, plus
    `grace_s`, the longest pause the beat takes while Redis is unreachable: an outage is not a
    wedged worker, and a liveness probe must not restart it for one)."""
    if last_beat is None:
        return "the beat has not run yet"
    age = now - last_beat
    allowed = BEATS_FRESH * beat_s + grace_s
    if age > allowed:
        return (
            f"the beat last ran {age:.1f} s ago, more than {BEATS_FRESH} beats of {beat_s:g} s "
            f"plus {grace_s:g} s of reconnect backoff"
        )
    return None


class ProbeServer:
    """The HTTP side of /metrics, /healthz and /readyz on `address`; `port` is the bound port.
    What each path answers is the subclass's: `metrics()`, `health()`, `readiness()`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.port: int | None = None
        self.log = get_logger()
        self._handlers: set[asyncio.Task[None]] = set()

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        host, port = parse_host_port(self.address)
        try:
            server = await asyncio.start_server(self._accept, host, port)
        except OSError as exc:
            raise HttpBindError(
                f"cannot serve --http on {self.address}: {exc.strerror or exc}"
            ) from exc
        try:
            self.port = int(server.sockets[0].getsockname()[1])
            self.log.info("http_serving", host=host, port=self.port)
            task_status.started(self.port)
            await anyio.sleep_forever()
        finally:
            server.close()
            for task in self._handlers:
                task.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                status, ctype, body = await self._respond(reader)
                head = (
                    f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                writer.write(head.encode("latin-1") + body)
                await writer.drain()
        except (OSError, TimeoutError, ValueError) as exc:
            self.log.debug("http_request_failed", error=str(exc))
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
        request = (await reader.readline()).decode("latin-1").split()
        while (await reader.readline()).strip():
            pass  # headers: nothing here needs them
        if len(request) != 3 or not request[2].startswith("HTTP/"):
            return 400, TEXT, b"bad request line\n"
        method, path = request[0], request[1].partition("?")[0]
        if method != "GET":
            return 405, TEXT, b"only GET\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, await self.metrics()
        if path == "/healthz":
            return _text(self.health())
        if path == "/readyz":
            return _text(await self.readiness())
        return 404, TEXT, b"not found: try /metrics, /healthz or /readyz\n"

    async def metrics(self) -> bytes:
        raise NotImplementedError

    def health(self) -> str | None:
        """Why the service is not alive, or None."""
        raise NotImplementedError

    async def readiness(self) -> str | None:
        """Why the service should not be sent work, or None."""
        raise NotImplementedError


class HttpEndpoint(ProbeServer):
    """Serves /metrics, /healthz and /readyz for one worker; `port` is the bound port."""

    def __init__(
        self,
        address: str,
        client: Redis,
        queues: dict[str, Queue],
        exposition: Exposition,
        stopping: Callable[[], bool],
    ) -> None:
        super().__init__(address)
        self.client = client
        self.queues = queues
        self.exposition = exposition
        self.stopping = stopping

    async def metrics(self) -> bytes:
        depths: dict[str, Counts] = {}
        lanes: dict[str, LanesView] = {}
        try:
            for name, queue in self.queues.items():
                depths[name] = await queue.counts()
                lanes[name] = await read_lanes(queue)
        except RedisError as exc:
            self.log.warning("metrics_depth_failed", error=str(exc))
        return self.exposition.latest(depths, lanes)

    def health(self) -> str | None:
        """Why the worker is not alive, or None. A draining worker is alive without a beat."""
        if self.stopping():
            return None
        beat = self.exposition.collector.beat
        return beat_stale(beat.last_beat, beat.clock.monotonic(), beat.beat_s, beat.grace_s)

    async def readiness(self) -> str | None:
        """Why the worker should not be sent work, or None."""
        if self.stopping():
            return "stopping: draining held jobs"
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await self.client.ping()
        except (RedisError, OSError, TimeoutError) as exc:
            return f"redis unreachable: {exc or type(exc).__name__}"
        return None


def _text(reason: str | None) -> tuple[int, str, bytes]:
    if reason is None:
        return 200, TEXT, b"ok\n"
    return 503, TEXT, f"{reason}\n".encode()


async def fetch(host: str, port: int, path: str, timeout_s: float = 2.0) -> tuple[int, str]:
    """GET `path` from HOST:PORT; the status and body. Raises OSError or TimeoutError."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            reply = await reader.read()
        finally:
            writer.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError(f"not an HTTP reply from {host}:{port}: {reply[:80]!r}")
    return int(status_line[1]), body.decode("utf-8", "replace")
