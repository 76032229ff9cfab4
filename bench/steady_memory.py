"""What a queue costs in server memory beyond its backlog while it drains at full speed.

    python -m bench.steady_memory [--seconds S] [--server redis|valkey|PATH]

On a fresh redis-server (free port, temp dir, no persistence): measures the bytes one pending job
costs (20 000 no-op jobs enqueued in batches of 1000), then starts one `emq-worker run -c 100` on
the no-op task and keeps 20 000 to 40 000 jobs pending (the driver tops pending up every 20 ms),
for S seconds (default 90: every key the drain leaves behind with a TTL of up to a minute has
reached its steady count by then). Every second it samples `used_memory`, pending and the
completed count. It reports the drain rate over the last 20 s, and the memory above the backlog's
own size (used_memory - the empty server's - pending x bytes per pending job), as the median of
the last 10 samples. Then it stops the worker, walks the keyspace (SCAN, MEMORY USAGE of every
10th key) and prints the count and bytes of each kind of key (`emq:{q}:<kind>...`): what the
steady state left behind. Pinned as the bench pins (bench/pinning.py): the server and the driver
on core 0, the worker on core 1.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import redis

from bench.pinning import pin_self, pinned, plan_cores
from bench.server import server_binary
from emq_worker import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys
from tests.support.server import RedisServer

QUEUE = "steady"
PROBE_JOBS = 20_000
BATCH = 1_000
LOW, HIGH = 20_000, 40_000
TOP_UP_S = 0.02
RATE_WINDOW_S = 20
MEDIAN_OF = 10
SAMPLE_EVERY = 10
KIND = re.compile(r"emq:\{[^}]*\}:([a-z_]+)(:[^:]+)?(:[a-z_]+)?")
REPO = Path(__file__).resolve().parent.parent


def kind(key: str) -> str:
    """`job`, `job:receipt`, `claim`, `receipts`, ...: a key's kind, ids left out."""
    match = KIND.fullmatch(key)
    if match is None:
        return key
    name, _, sub = match.groups()
    return name + (sub or "")


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


async def fill(url: str, jobs: int) -> None:
    async with Producer.from_url(url) as producer:
        for _ in range(0, jobs, BATCH):
            await producer.enqueue_many(QUEUE, [JobSpec("noop")] * BATCH)


async def keep_pending(url: str, seconds: float) -> None:
    """Top pending up to HIGH whenever it falls under LOW, for `seconds`."""
    async with Producer.from_url(url) as producer:
        client = producer.client
        pending_key = QueueKeys.of(QUEUE).pending
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pending = int(await client.zcard(pending_key))
            for _ in range(max(0, HIGH - pending) // BATCH if pending < LOW else 0):
                await producer.enqueue_many(QUEUE, [JobSpec("noop")] * BATCH)
            await anyio.sleep(TOP_UP_S)


def sample(client: redis.Redis, at0: float) -> tuple[float, int, int, int]:
    keys = QueueKeys.of(QUEUE)
    pending = int(client.zcard(keys.pending))
    completed = int(client.hget(keys.completed, "count") or 0)
    return time.monotonic() - at0, used(client), pending, completed


def breakdown(client: redis.Redis) -> list[tuple[str, int, int]]:
    """(kind, keys, bytes estimated from every SAMPLE_EVERY-th key), largest first."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for n, key in enumerate(client.scan_iter(count=10_000)):
        name = kind(key.decode())
        counts[name] += 1
        if n % SAMPLE_EVERY == 0:
            sizes[name] += SAMPLE_EVERY * int(client.memory_usage(key) or 0)
    return sorted(((k, counts[k], sizes[k]) for k in counts), key=lambda row: -row[2])


def run(server: RedisServer, seconds: float) -> dict[str, Any]:
    client = redis.Redis(port=server.port)
    client.flushall()
    empty = used(client)
    anyio.run(fill, server.url, PROBE_JOBS)
    per_pending = (used(client) - empty) / PROBE_JOBS
    command = [sys.executable, "-c", "from emq_worker.cli.main import main; main()", "run"]
    command += ["--redis-url", server.url, "-q", QUEUE, "-c", "100", "--log-level", "warning"]
    command += ["--app", "bench.apps_emq:app"]
    worker = subprocess.Popen(pinned(command, plan_cores().worker), cwd=REPO, env=dict(os.environ))
    samples: list[tuple[float, int, int, int]] = []
    at0 = time.monotonic()
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            future = portal.start_task_soon(keep_pending, server.url, seconds)
            while not future.done():
                time.sleep(1.0)
                samples.append(sample(client, at0))
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    kinds = breakdown(client)  # the worker stopped: no key is added meanwhile
    (t0, _, _, done0), (t1, _, _, done1) = _rate_span(samples)
    over = [mem - empty - pending * per_pending for _, mem, pending, _ in samples[-MEDIAN_OF:]]
    return {
        "jobs_s": (done1 - done0) / (t1 - t0),
        "per_pending_bytes": per_pending,
        "pending": statistics.median(p for _, _, p, _ in samples[-MEDIAN_OF:]),
        "over_backlog_mb": statistics.median(over) / 2**20,
        "kinds": kinds,
    }


def _rate_span(samples: list[tuple[float, int, int, int]]) -> tuple[Any, Any]:
    last = samples[-1]
    first = next(s for s in samples if s[0] >= last[0] - RATE_WINDOW_S)
    return first, last


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steady_memory", description=__doc__)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--server", default=None, metavar="redis|valkey|PATH")
    args = parser.parse_args(argv)
    binary = server_binary(args.server)
    pin_self(plan_cores().driver)  # the server (started from here) and the driver: core 0
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp), binary=binary) as server:
        found = run(server, args.seconds)
    print(f"drain: {found['jobs_s']:.0f} jobs/s (last {RATE_WINDOW_S} s)")
    print(f"pending: {found['pending']:.0f} jobs at {found['per_pending_bytes']:.0f} bytes each")
    print(f"used_memory above the backlog: {found['over_backlog_mb']:.1f} MB")
    print("| kind | keys | MB (sampled) |\n|---|---:|---:|")
    for name, count, size in found["kinds"][:10]:
        print(f"| {name} | {count} | {size / 2**20:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
