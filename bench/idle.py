"""`python -m bench --idle [--window S] [--rows W:Q:N[:T],...]`: what an idle fleet costs.

For each row, W `emq-worker run` processes (default settings, `-c 100`) serve the same Q queues on
a fresh redis-server (free port, temp dir, no persistence), nothing to do; N > 0 puts N jobs in
the first queue and pauses it (a backlog an operator holds back: pending, never claimable); T > 0
leaves T wake tokens on every queue's wake list before the workers start (what a backlog drained
by busy workers leaves behind: up to 64 per queue). Once
every worker is parked (W clients blocked in BLPOP), the server's counters are reset and read
again after the window: commands/s (INFO commandstats: the commands Lua scripts run included,
the bench's own INFO/CONFIG/CLIENT calls left out), round trips/s (`total_reads_processed`),
Redis CPU and the workers' CPU (utime + stime of their processes, in % of one core). Prints one
Markdown table. Nothing is pinned.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.server import server_binary
from emq_worker.protocol.keys import QueueKeys
from tests.support.server import RedisServer

DEFAULT_ROWS = "1:1:0,1:10:0,1:100:0,8:1:0,8:10:0,1:100:10000,1:100:0:64"
DEFAULT_WINDOW_S = 12.0
"""A check window of 100 queues (10 beats of 1 s) and an offer's renewal (10 s), and a beat."""
OBSERVER = frozenset({"info", "config|resetstat", "client|list", "config", "client"})
PARK_DEADLINE_S = 120.0
HEADER = (
    "| idle workers W | queues Q | pending N (paused) | stale tokens T per queue | commands/s "
    "| round trips/s | worker CPU, % of a core (all W) | Redis CPU % | most called, per s |\n"
    "|---|---|---|---|---|---|---|---|---|"
)
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Row:
    workers: int
    queues: int
    pending: int
    tokens: int = 0

    @classmethod
    def parse(cls, text: str) -> Row:
        return cls(*(int(part) for part in text.split(":")))


@dataclass(frozen=True, slots=True)
class Cost:
    commands_s: float
    round_trips_s: float
    redis_cpu: float
    worker_cpu: float
    top: str


def worker_command(url: str, queues: list[str]) -> list[str]:
    """`emq-worker run` through this interpreter (PYTHONPATH picks the code under test)."""
    run = "from emq_worker.cli.main import main; main()"
    args = ["run", "--redis-url", url, "--queue", ",".join(queues), "-c", "100"]
    app = ["--app", "tests.apps.ledger:app", "--log-level", "warning"]
    return [sys.executable, "-c", run, *args, *app]


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def wait_parked(client: redis.Redis, workers: int) -> None:
    deadline = time.monotonic() + PARK_DEADLINE_S
    while time.monotonic() < deadline:
        if sum(entry.get("cmd") == "blpop" for entry in client.client_list()) >= workers:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{workers} workers did not all park within {PARK_DEADLINE_S} s")


def backlog(client: redis.Redis, queue: str, jobs: int) -> None:
    """`jobs` rows in pending (EchoMQ's flat shape: no wake token), the queue paused."""
    keys = QueueKeys.of(queue)
    client.hset(keys.meta, "paused", "1")
    pipe = client.pipeline(transaction=False)
    for n in range(jobs):
        job_id = f"JOB{n:011d}"
        pipe.hset(keys.job(job_id), mapping={"state": "pending", "attempts": "0", "payload": "{}"})
        pipe.zadd(keys.pending, {job_id: 0})
    pipe.execute()


def measure(server: RedisServer, row: Row, window_s: float) -> Cost:
    client = redis.Redis(port=server.port, decode_responses=True)
    client.flushall()
    queues = [f"idle.{n}" for n in range(row.queues)]
    if row.pending:
        backlog(client, queues[0], row.pending)
    for queue in queues if row.tokens else ():
        client.lpush(QueueKeys.of(queue).wake, *["1"] * row.tokens)
    env = {**os.environ, "EMQ_TEST_LEDGER": os.devnull}
    command = worker_command(server.url, queues)
    procs = [subprocess.Popen(command, env=env, cwd=REPO) for _ in range(row.workers)]
    try:
        wait_parked(client, row.workers)
        pids = [proc.pid for proc in procs]
        before = (client.info("stats"), client.info("cpu"), cpu_ticks(pids), time.monotonic())
        client.config_resetstat()
        time.sleep(window_s)
        after = (client.info("commandstats"), client.info("stats"), client.info("cpu"))
        cost = _cost(before, after, cpu_ticks(pids), time.monotonic())
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        client.close()
    return cost


def _cost(before: tuple[Any, ...], after: tuple[Any, ...], ticks: int, now: float) -> Cost:
    _, cpu0, ticks0, at0 = before
    commandstats, stats1, cpu1 = after
    seconds = now - at0
    calls = {
        name.removeprefix("cmdstat_"): int(fields["calls"])
        for name, fields in commandstats.items()
        if name.removeprefix("cmdstat_") not in OBSERVER
    }
    top = ", ".join(f"{name} {n / seconds:.0f}" for name, n in _most(calls, 4))
    redis_s = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_sys", "used_cpu_user"))
    # resetstat zeroes total_reads_processed too: the second read is the window's.
    return Cost(
        commands_s=sum(calls.values()) / seconds,
        round_trips_s=int(stats1["total_reads_processed"]) / seconds,
        redis_cpu=100 * redis_s / seconds,
        worker_cpu=100 * (ticks - ticks0) / TICKS_PER_S / seconds,
        top=top,
    )


def _most(calls: dict[str, int], n: int) -> list[tuple[str, int]]:
    return sorted(calls.items(), key=lambda item: -item[1])[:n]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench --idle", description=__doc__)
    parser.add_argument("--idle", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rows", default=DEFAULT_ROWS, help="W:Q:N,... (workers:queues:pending)")
    parser.add_argument("--window", type=float, default=DEFAULT_WINDOW_S, help="seconds measured")
    parser.add_argument("--server", default=None, metavar="redis|valkey|PATH")
    args = parser.parse_args(argv)
    rows = [Row.parse(text) for text in args.rows.split(",")]
    print(HEADER)
    measure_rows(rows, args.window, args.server, report=True)
    return 0


def measure_rows(
    rows: list[Row], window_s: float, server: str | None, *, report: bool = False
) -> list[tuple[Row, Cost]]:
    """Each row's cost on a fresh server (`report`: print each row's line as it comes)."""
    binary = server_binary(server)
    costs = []
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp), binary=binary) as redis:
        for row in rows:
            cost = measure(redis, row, window_s)
            costs.append((row, cost))
            if report:
                print(line(row, cost), flush=True)
    return costs


def line(row: Row, cost: Cost) -> str:
    return (
        f"| {row.workers} | {row.queues} | {row.pending} | {row.tokens} "
        f"| {cost.commands_s:.1f} "
        f"| {cost.round_trips_s:.0f} | {cost.worker_cpu:.1f} | {cost.redis_cpu:.1f} "
        f"| {cost.top} |"
    )
