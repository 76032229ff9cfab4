"""What a Valkey call from a handler costs the worker, by client: python -m bench.handler_client.

C concurrent tasks each make N/C calls of INCR, as C handlers each making one call would; the
figure is calls per second and the process's CPU per call, median of `--repeat` rounds, against
the bench's own server (free port, temp dir). Clients measured:

- `redis-py`: redis-py's asyncio client with its pool (one connection per concurrent caller),
  hiredis parsing its replies (what a handler holding its own client gets);
- `redis-py, python parser`: the same without hiredis;
- `ctx.redis`: emq-worker's handler client (emq_worker/valkey/autopipeline.py) over a client
  made as the worker makes its own (its socket timeout included): the calls made in one turn of
  the event loop go out in one write;
- `valkey-glide`: when the `glide` package is importable (Rust core, one multiplexed connection;
  its CPU counts its own threads), else left out with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool

from bench.server import BenchRedis, server_binary
from emq_worker import WorkerSettings
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.autopipeline import handler_client
from emq_worker.valkey.connection import connect

KEY = "bench:handler_client"
Incr = Callable[[], Awaitable[Any]]


async def rate(incr: Incr, calls: int, callers: int) -> tuple[float, float]:
    """(calls/s, CPU ms per call) for `callers` tasks making `calls` calls in all."""
    each = calls // callers

    async def caller() -> None:
        for _ in range(each):
            await incr()

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller() for _ in range(callers)))
    done = each * callers
    return done / (time.perf_counter() - wall), (time.process_time() - cpu) * 1000 / done


async def redis_py(url: str, python_parser: bool) -> tuple[Incr, Callable[[], Awaitable[None]]]:
    options: dict[str, Any] = {"socket_timeout": None}
    if python_parser:
        from redis._parsers import _AsyncRESP2Parser

        options["parser_class"] = _AsyncRESP2Parser
    client = Redis(connection_pool=ConnectionPool.from_url(url, **options))
    return lambda: client.incr(KEY), client.aclose


async def autopipelined(url: str) -> tuple[Incr, Callable[[], Awaitable[None]]]:
    """`ctx.redis` as a worker makes it: over the worker's own client, whose socket timeout
    bounds every reply (WorkerSettings' default)."""
    base = connect(
        url,
        DEFAULT_WIRE_VERSION,
        socket_timeout_s=WorkerSettings(queues=("bench",)).socket_timeout_ms / 1000,
    )
    client = handler_client(base)

    async def close() -> None:
        await client.aclose()
        await base.aclose()

    return lambda: client.incr(KEY), close


async def glide(port: int) -> tuple[Incr, Callable[[], Awaitable[None]]] | None:
    try:
        from glide import (  # type: ignore[import-not-found,unused-ignore]
            GlideClient,
            GlideClientConfiguration,
            NodeAddress,
        )
    except ImportError:
        return None
    config = GlideClientConfiguration([NodeAddress("127.0.0.1", port)])
    client = await GlideClient.create(config)
    return lambda: client.incr(KEY), client.close


async def measure(redis: BenchRedis, calls: int, callers: int, repeat: int) -> list[str]:
    makers: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("redis-py", lambda: redis_py(redis.url, python_parser=False)),
        ("redis-py, python parser", lambda: redis_py(redis.url, python_parser=True)),
        ("ctx.redis (auto-pipelined redis-py)", lambda: autopipelined(redis.url)),
        ("valkey-glide", lambda: glide(redis.port)),
    ]
    lines = ["| client | calls/s | worker CPU ms per call |", "| --- | ---: | ---: |"]
    for name, make in makers:
        made = await make()
        if made is None:
            lines.append(f"| {name} | not installed | |")
            continue
        incr, close = made
        await rate(incr, callers * 10, callers)  # connections made, caches warm
        rounds = [await rate(incr, calls, callers) for _ in range(repeat)]
        await close()
        per_s = statistics.median(r[0] for r in rounds)
        cpu = statistics.median(r[1] for r in rounds)
        lines.append(f"| {name} | {per_s:,.0f} | {cpu:.4f} |")
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.handler_client", description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--callers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server", default=None, metavar="redis|valkey|PATH")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        redis = BenchRedis(Path(directory), None, server_binary(args.server))
        redis.start()
        try:
            lines = asyncio.run(measure(redis, args.calls, args.callers, args.repeat))
        finally:
            redis.stop()
    print(f"{args.callers} concurrent callers, {args.calls} INCR calls, median of {args.repeat}")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
