"""What fair lanes and priorities cost per job, beside the flat path: the Redis commands the
claim and settle scripts run (INFO commandstats: exact, whatever else loads the machine), their
server time (EVALSHA usec), both divided by the jobs, and the client's wall time, on the bench's
own server (free port, no persistence).

    python -m bench.lanes_cost [--jobs 20000] [--repeat 3] [--server redis|valkey|PATH]

Each scenario enqueues its jobs (not measured), then, as a worker does, claims B jobs and
completes them in one settle, again and again until none is left (INFO commandstats read around
each call): B = 100 (a busy worker's batches) and B = 1 (a worker with one free slot).
Scenarios: flat (plain jobs: the path every queue without lanes takes);
priority (five priorities); lanes-10 and lanes-1000 (jobs spread over 10 or 1000 groups);
lanes-10-limited (each group with a limit that does not bind, so the limit is read on every
turn); mixed (half ungrouped, half over 10 groups). Median of `--repeat` runs. A scenario this
checkout cannot express (an older emq-worker without group=/priority=) prints "-".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bench.server import BenchRedis, server_binary
from emq_worker import JobSpec, Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import Completion, HeldLease
from emq_worker.valkey.connection import connect

ENQUEUE_BATCH = 1000
LEASE_MS = 600_000
RECEIPT_MS = 60_000
Spec = Callable[[int], JobSpec]


def _spec(**options: Any) -> JobSpec:
    return JobSpec(payload=b"x", **options)


SCENARIOS: dict[str, Spec] = {
    "flat": lambda i: _spec(),
    "priority": lambda i: _spec(priority=i % 5 - 2),
    "lanes-10": lambda i: _spec(group=f"g{i % 10}"),
    "lanes-1000": lambda i: _spec(group=f"g{i % 1000}"),
    "lanes-10-limited": lambda i: _spec(group=f"g{i % 10}"),
    "mixed": lambda i: _spec(group=f"g{i % 10}") if i % 2 else _spec(),
}
LIMITED = {"lanes-10-limited": 10}
"""Scenarios whose groups get a limit (one that never binds)."""


@dataclass(frozen=True, slots=True)
class Cost:
    claim_cmds: float
    """Commands the claim scripts ran per job (EVALSHA itself not counted)."""
    settle_cmds: float
    claim_us: float
    """Server µs of claim scripts per job."""
    settle_us: float
    wall_us: float
    """Client wall µs per job, claim and settle together (round trips included)."""


@dataclass(frozen=True, slots=True)
class Reading:
    cmds: int
    """Commands run, but EVALSHA and the bench's own INFO."""
    usec: int
    """Server µs of EVALSHA (the scripts' commands included)."""


def _read(server: BenchRedis) -> Reading:
    stats: dict[str, Any] = server.client.info("commandstats")
    cmds, usec = 0, 0
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name == "evalsha":
            usec = int(value["usec"])
        elif name != "info":
            cmds += int(value["calls"])
    return Reading(cmds, usec)


@dataclass(slots=True)
class Tally:
    """Commands, server µs and client wall seconds of one phase (claims, or settles)."""

    cmds: int = 0
    usec: int = 0
    wall: float = 0.0

    def add(self, before: Reading, after: Reading, wall: float) -> None:
        self.cmds += after.cmds - before.cmds
        self.usec += after.usec - before.usec
        self.wall += wall


async def _limit(queue: Queue, groups: int, jobs: int) -> None:
    from emq_worker.protocol.lane_verbs import limit_lane

    for g in range(groups):
        await limit_lane(queue, f"g{g}", jobs)


async def run_once(server: BenchRedis, name: str, jobs: int, batch: int) -> Cost:
    server.flush()
    client = connect(server.url, DEFAULT_WIRE_VERSION)
    try:
        producer = Producer(client)
        queue = producer.queue("bench.lanes")
        if name in LIMITED:
            await _limit(queue, LIMITED[name], jobs)
        specs = [SCENARIOS[name](i) for i in range(jobs)]
        for first in range(0, jobs, ENQUEUE_BATCH):
            await producer.enqueue_many(queue.name, specs[first : first + ENQUEUE_BATCH])
        await queue.claim(0, LEASE_MS)  # loaded before the clock starts (settle: by the warm-up)
        claims, settles = Tally(), Tally()
        done = 0
        # A worker's steady state: claim B, settle them, again; the lanes still hold work while
        # each settle runs (its ring bookkeeping is then paid in full).
        while done < jobs:
            before, began = _read(server), time.perf_counter()
            claimed = (await queue.claim(batch, LEASE_MS)).jobs
            middle, between = time.perf_counter(), _read(server)
            if not claimed:
                raise RuntimeError(f"{name}: claimed {done} of {jobs}, then nothing")
            leases = [Completion(HeldLease(job.id, job.token, job.nonce)) for job in claimed]
            settling = time.perf_counter()
            await queue.settle(leases, RECEIPT_MS)
            settled = time.perf_counter()
            claims.add(before, between, middle - began)
            settles.add(between, _read(server), settled - settling)
            done += len(claimed)
    finally:
        await client.aclose()
    return Cost(
        claims.cmds / jobs,
        settles.cmds / jobs,
        claims.usec / jobs,
        settles.usec / jobs,
        (claims.wall + settles.wall) * 1e6 / jobs,
    )


def measure(server: BenchRedis, name: str, jobs: int, batch: int, repeat: int) -> Cost | None:
    try:
        runs = [anyio.run(run_once, server, name, jobs, batch) for _ in range(repeat)]
    except (TypeError, ImportError):  # an emq-worker without group= / priority=
        return None
    fields = ("claim_cmds", "settle_cmds", "claim_us", "settle_us", "wall_us")
    return Cost(*(statistics.median(getattr(c, f) for c in runs) for f in fields))


def row(name: str, costs: list[Cost | None]) -> str:
    cells = [name]
    for cost in costs:
        if cost is None:
            cells += ["-"] * 5
        else:
            cells += [f"{cost.claim_cmds:.1f}", f"{cost.settle_cmds:.1f}"]
            cells += [f"{cost.claim_us:.1f}", f"{cost.settle_us:.1f}", f"{cost.wall_us:.0f}"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run at B = 100")
    parser.add_argument("--single", type=int, default=2_000, help="jobs per run at B = 1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server", default=None)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        BenchRedis(Path(tmp), None, server_binary(args.server)) as server,
    ):
        measure(server, "flat", 1000, 100, 1)  # warm up: scripts loaded, caches filled
        print(f"{server.server()}, median of {args.repeat}; per job: commands run, µs")
        head = ["scenario"]
        for b in (100, 1):
            head += [f"claim cmds (B={b})", f"settle cmds (B={b})", f"claim µs (B={b})"]
            head += [f"settle µs (B={b})", f"wall µs (B={b})"]
        print("| " + " | ".join(head) + " |")
        print("|---" + "|---:" * (len(head) - 1) + "|")
        for name in args.only.split(","):
            costs = [
                measure(server, name, args.jobs, 100, args.repeat),
                measure(server, name, args.single, 1, args.repeat),
            ]
            print(row(name, costs), flush=True)


if __name__ == "__main__":
    main()
