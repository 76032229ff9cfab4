"""`emq-worker run --processes N`: how a fleet of N worker processes under one parent drains a
backlog, against one process (`python -m bench.processes`).

For each N, a fresh backlog of no-op jobs is enqueued (the queue paused meanwhile), then
`emq-worker run --processes N --burst -c 100` drains it to the end and exits. Reported per N:
jobs/s over the whole run (process start-up included, the same for every N), the server's CPU
per job, and the jobs/s each extra process added. On a machine with fewer cores than N + 1 (the
server needs one too) the processes share cores and the figure says so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.server import server_binary
from emq_worker import JobSpec, sync_producer
from emq_worker.protocol.keys import QueueKeys
from tests.support.server import RedisServer

QUEUE = "fleet"
BATCH = 1_000
REPO = Path(__file__).resolve().parent.parent
HEADER = "| processes | jobs | seconds | jobs/s | Redis CPU ms/job |\n" + "| ---: " * 5 + "|"


def fleet_command(url: str, processes: int) -> list[str]:
    """`emq-worker run` through this interpreter (PYTHONPATH picks the code under test)."""
    run = "from emq_worker.cli.main import main; main()"
    args = ["run", "--redis-url", url, "--queue", QUEUE, "-c", "100", "--burst"]
    more = ["--processes", str(processes), "--app", "tests.apps.ledger:app"]
    return [sys.executable, "-c", run, *args, *more, "--log-level", "warning"]


def backlog(client: redis.Redis, url: str, jobs: int) -> None:
    """`jobs` no-op jobs in pending, enqueued while the queue is paused (no worker runs yet)."""
    client.hset(QueueKeys.of(QUEUE).meta, "paused", "1")
    with sync_producer(url) as producer:
        for start in range(0, jobs, BATCH):
            specs = [JobSpec("noop", {})] * min(BATCH, jobs - start)
            producer.enqueue_many(QUEUE, specs)


def redis_cpu_s(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def measure(server: RedisServer, processes: int, jobs: int) -> tuple[float, float]:
    """Seconds to drain `jobs` with `processes` workers, and the server's CPU seconds meanwhile."""
    client = redis.Redis(port=server.port)
    client.flushall()
    backlog(client, server.url, jobs)
    env = {**os.environ, "EMQ_TEST_LEDGER": os.devnull}
    cpu0, started = redis_cpu_s(client), time.monotonic()
    client.hdel(QueueKeys.of(QUEUE).meta, "paused")
    client.lpush(QueueKeys.of(QUEUE).wake, "1")
    done = subprocess.run(fleet_command(server.url, processes), env=env, cwd=REPO, check=False)
    seconds, cpu = time.monotonic() - started, redis_cpu_s(client) - cpu0
    left = client.zcard(QueueKeys.of(QUEUE).pending) + client.zcard(QueueKeys.of(QUEUE).active)
    client.close()
    if done.returncode != 0 or left:
        raise RuntimeError(f"--processes {processes} exited {done.returncode} with {left} left")
    return seconds, cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--processes", default="1,2", help="N,... to compare")
    parser.add_argument("--server", default=None, metavar="redis|valkey|PATH")
    args = parser.parse_args(argv)
    binary = server_binary(args.server)
    print(f"{os.cpu_count()} cores; {args.jobs} no-op jobs; -c 100 per process")
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp), binary=binary) as server:
        for processes in (int(n) for n in args.processes.split(",")):
            seconds, cpu = measure(server, processes, args.jobs)
            rate = args.jobs / seconds
            print(
                f"| {processes} | {args.jobs} | {seconds:.1f} | {rate:.0f} "
                f"| {1000 * cpu / args.jobs:.4f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
