"""`python -m bench --cluster [--jobs N] [--task noop|sleep1ms] [--concurrency C]`

Throughput on a Redis Cluster of 1, 2 and 3 primaries (real redis-server processes on free ports,
tests/support/cluster.py), with one queue and one `emq-worker run` process per primary, every
worker serving every queue. A single redis-server (`redis://`, one queue, one worker) is the
baseline. N jobs in all are pre-enqueued, spread evenly over the queues; then the workers start.
jobs/s = jobs completed between the first and the last poll that saw progress (the queues'
`metrics:completed` counters, read through the cluster client every 20 ms) / that time, so worker
start-up is not counted. Nothing is pinned: primaries, workers and the driver share the cores.
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

import anyio

from bench.server import server_binary
from emq_worker.jobs.producer import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.binary import label
from emq_worker.valkey.connection import connect
from tests.support.cluster import ClusterOfServers
from tests.support.server import RedisServer

REPO = Path(__file__).resolve().parent.parent
EMQ_WORKER = Path(sys.executable).parent / "emq-worker"
ENQUEUE_BATCH = 1000
POLL_S = 0.02
DRAIN_DEADLINE_S = 300.0


@dataclass(frozen=True, slots=True)
class Run:
    label: str
    primaries: int
    workers: int
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


def one_queue_per_primary(cluster: ClusterOfServers) -> list[str]:
    chosen: dict[int, str] = {}
    n = 0
    while len(chosen) < len(cluster.primary_ports()):
        name = f"bench.{n}"
        n += 1
        chosen.setdefault(cluster.owner_port(hash_slot(QueueKeys.of(name).pending)), name)
    return list(chosen.values())


async def fill(url: str, queues: list[str], jobs: int, task: str) -> None:
    client = connect(url, DEFAULT_WIRE_VERSION)
    try:
        producer = Producer(client)
        per_queue = jobs // len(queues)
        for queue in queues:
            for start in range(0, per_queue, ENQUEUE_BATCH):
                specs = [JobSpec(task)] * min(ENQUEUE_BATCH, per_queue - start)
                await producer.enqueue_many(queue, specs)
    finally:
        await client.aclose()


async def watch(url: str, queues: list[str], jobs: int) -> tuple[int, float]:
    """(jobs completed, seconds) between the first and the last poll that saw progress."""
    client = connect(url, DEFAULT_WIRE_VERSION)
    keys = [QueueKeys.of(queue).completed for queue in queues]
    first: tuple[int, float] | None = None
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            counts = [await client.hget(key, "count") for key in keys]
            done = sum(int(count or 0) for count in counts)
            now = time.monotonic()
            if done and first is None:
                first = (done, now)
            if done >= jobs and first is not None:
                return done - first[0], now - first[1]
            await anyio.sleep(POLL_S)
    finally:
        await client.aclose()
    raise RuntimeError(f"the workers did not finish {jobs} jobs in {DRAIN_DEADLINE_S} s")


def start_workers(
    url: str, queues: list[str], count: int, concurrency: int, logs: Path
) -> list[subprocess.Popen[bytes]]:
    args = [str(EMQ_WORKER), "run", "--app", "bench.apps_emq:app", "--redis-url", url]
    args += ["--concurrency", str(concurrency), "--log-format", "json", "--log-level", "warning"]
    args += [arg for queue in queues for arg in ("--queue", queue)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    workers = []
    for n in range(count):
        with (logs / f"worker{n}.log").open("ab") as log:
            workers.append(subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=log))
    return workers


def measure(label: str, url: str, queues: list[str], args: argparse.Namespace, logs: Path) -> Run:
    jobs = args.jobs // len(queues) * len(queues)
    anyio.run(fill, url, queues, jobs, args.task)
    workers = start_workers(url, queues, len(queues), args.concurrency, logs)
    try:
        done, seconds = anyio.run(watch, url, queues, jobs)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    return Run(label, len(queues), len(workers), done, seconds)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench --cluster", description=__doc__)
    parser.add_argument("--cluster", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs per run, in all")
    parser.add_argument("--task", choices=("noop", "sleep1ms"), default="noop")
    parser.add_argument("--concurrency", type=int, default=100, help="per worker process")
    parser.add_argument("--primaries", default="1,2,3", help="cluster sizes to run")
    parser.add_argument(
        "--server",
        default=None,
        metavar="redis|valkey|PATH",
        help="the server binary (default: redis-server on PATH, else the embedded Valkey)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    binary = server_binary(args.server)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="emq-bench-cluster-") as tmp:
        base = Path(tmp)
        with RedisServer(base / "single", binary=binary) as single:
            logs = base / "single-logs"
            logs.mkdir()
            runs.append(measure(f"single {label(binary)}", single.url, ["bench.0"], args, logs))
        for primaries in (int(p) for p in args.primaries.split(",")):
            cluster_of = ClusterOfServers(
                base / f"c{primaries}", primaries=primaries, binary=binary
            )
            with cluster_of as cluster:
                logs = base / f"c{primaries}-logs"
                logs.mkdir()
                queues = one_queue_per_primary(cluster)
                setup = f"cluster, {primaries} primar{'y' if primaries == 1 else 'ies'}"
                runs.append(measure(setup, cluster.url, queues, args, logs))
            print(f"{runs[-1].label}: {runs[-1].rate:,.0f} jobs/s", file=sys.stderr)
    print(
        f"{args.task} jobs, {args.jobs} per run, concurrency {args.concurrency} per worker, "
        f"{len(os.sched_getaffinity(0))} cores, nothing pinned\n"
    )
    print("| setup | queues | worker processes | jobs/s |")
    print("| --- | ---: | ---: | ---: |")
    for run in runs:
        print(f"| {run.label} | {run.primaries} | {run.workers} | {run.rate:,.0f} |")
    return 0
