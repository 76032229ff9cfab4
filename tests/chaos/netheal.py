"""The namespace partition rows judged after the heal (netns.py makes the cut):

- `producer`: a producer inside the cut-off namespace enqueues bursts of ids it chose itself
  (netproducer.py) while worker B runs them over the unix socket; the link goes down mid-burst
  and comes back after `cut_s`. The burst in flight at the cut fails (or is answered late) and is
  re-sent with the same ids after the heal; every id must run exactly once and none be lost.
- `longcut`: worker A runs long jobs when its link goes down for `cut_s` (30 s at full size);
  B takes them over and is stopped; the link comes back and new jobs are enqueued at once. A must
  still be up and run them: the row reports how long after the heal A started the first one.

One server (the EMQ_TEST_SERVER binary) per row. The rows report; the tests assert.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from tests.chaos import netns
from tests.chaos.checker import Fault
from tests.chaos.faults import Fleet, enqueue, judge, wait_drained
from tests.chaos.ledger import START, read_ledger
from tests.chaos.netcut import CutSize, namespaced, sides
from tests.chaos.rows import STOP_WITHIN_S, RowResult, _sizes, stop_gracefully, wait_started
from tests.support.processes import REPO_ROOT
from tests.support.wait import until

CADENCE = CutSize(runs=1)
"""The workers' lease, beat, renewal and concurrency: the partition rows' (netcut.py)."""
PRODUCER_EXIT_WITHIN_S = 150.0
"""The producer gives up re-sending after 120 s (netproducer.GIVE_UP_S)."""


BURST_PAUSE_MS = 20
PRODUCER_TIMEOUT_MS = 500
"""The producer's socket timeout: its call in flight at the cut fails within the cut."""


@dataclass(frozen=True, slots=True)
class ProducerCutSize:
    """`bursts` calls of `burst` ids each, BURST_PAUSE_MS apart; the cut lasts `cut_s` from the
    `cut_after`-th acknowledged burst."""

    cut_s: float = 3.0
    cut_after: int = 50
    bursts: int = 200
    burst: int = 25


async def producer_cut(directory: Path, size: ProducerCutSize) -> RowResult:
    """See the module docstring (`producer`)."""
    out, queue = directory / "producer", "chaos.netheal.producer"
    out.mkdir(parents=True)
    began = time.monotonic()
    async with namespaced(directory) as stage:
        client, processes = stage.client, stage.processes
        fleet = Fleet.sized(processes, queue, stage.server.local_url, CADENCE, max_attempts=20)
        await fleet.start(1)
        child = _spawn_producer(stage.cut, stage.server.veth_url, queue, out, size)
        try:
            await until(
                lambda: _acked(out) >= size.cut_after * size.burst,
                within=60,
                what=f"{size.cut_after} bursts acknowledged before the cut",
            )
            before = _acked(out)
            stage.cut.cut()
            fleet.faults.append(Fault("partition", time.monotonic()))
            await anyio.sleep(size.cut_s)
            stage.cut.heal()
            await until(
                lambda: child.poll() is not None,
                within=PRODUCER_EXIT_WITHIN_S,
                what="the producer done",
            )
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        ids = _acked_ids(out)
        await wait_drained(client, queue, within_s=60)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        starts = collections.Counter(
            e.job for e in read_ledger(processes.ledger.path.parent) if e.kind == START
        )
    facts = {
        "producer_exit": child.returncode,
        "acknowledged": len(ids),
        "distinct": len(set(ids)),
        "acknowledged_at_cut": before,
        "resends": _count(out / "resends"),
        "resent_ids_already_enqueued": _count(out / "duplicates"),
        "ran_once": sum(1 for job in set(ids) if starts[job] == 1),
        "ran_twice_or_more": sum(1 for job in set(ids) if starts[job] > 1),
        "never_ran": sum(1 for job in set(ids) if starts[job] == 0),
    }
    row = "netns producer cut mid-burst"
    return RowResult(row, verdict, _sizes(size), time.monotonic() - began, facts)


def _spawn_producer(
    cut: netns.Partition, url: str, queue: str, out: Path, size: ProducerCutSize
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    args = [
        *cut.inside(cut.worker_ns),
        *(sys.executable, "-m", "tests.chaos.netproducer", url, queue, str(out)),
        *("--bursts", str(size.bursts), "--burst", str(size.burst)),
        *("--pause-ms", str(BURST_PAUSE_MS), "--timeout-ms", str(PRODUCER_TIMEOUT_MS)),
    ]
    with (out / "producer.log").open("ab") as log:
        return subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=log, stderr=log)


def _count(path: Path) -> int:
    return int(path.read_text(encoding="utf-8")) if path.exists() else 0


def _acked(out: Path) -> int:
    return len(_acked_ids(out))


def _acked_ids(out: Path) -> list[str]:
    path = out / "acked"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


@dataclass(frozen=True, slots=True)
class LongCutSize:
    cut_s: float = 30.0
    jobs: int = 10
    """Long jobs A runs at the cut (B takes them over)."""
    fresh_jobs: int = 10
    """Jobs enqueued right after the heal, for A alone."""


async def long_cut(directory: Path, size: LongCutSize) -> RowResult:
    """See the module docstring (`longcut`); the workers run at the partition rows' cadence."""
    began = time.monotonic()
    cadence = CADENCE
    async with sides(directory, cadence) as side:
        client, queue, processes = side.client, cadence.queue, side.fleet.processes
        held_ms = int(size.cut_s * 1000 + 4 * cadence.lease_ms)
        ids = await enqueue(client, queue, size.jobs, "hold", ms=held_ms, again_ms=50)
        await wait_started(processes, ids)
        rescuer = (await side.fleet.start(1))[0]
        side.cut.cut()
        cut_at = time.time()
        side.fleet.faults.append(Fault("partition", time.monotonic(), side.holder.pid))
        await wait_drained(client, queue, within_s=size.cut_s + 30)  # B took them over
        rescuer.send(signal.SIGTERM)
        await rescuer.wait_exit(STOP_WITHIN_S)
        await anyio.sleep(max(0.0, cut_at + size.cut_s - time.time()))
        side.cut.heal()
        healed = time.time()
        fresh = await enqueue(client, queue, size.fresh_jobs, "work")
        started = await wait_started(processes, fresh)
        resumed = min(e.wall for e in started) - healed
        await wait_drained(client, queue, within_s=30)
        up = side.holder.returncode is None
        by_holder = sum(1 for e in started if e.pid == side.holder.pid)
        await stop_gracefully(side.fleet)
        verdict = await judge(client, side.fleet, [*ids, *fresh])
    facts = {
        "holder_up_after_heal": up,
        "resumed_s": round(resumed, 2),
        "fresh_started_by_holder": by_holder,
        "fresh_jobs": len(fresh),
    }
    return RowResult(
        f"netns cut {size.cut_s:g} s, healed",
        verdict,
        _sizes(size),
        time.monotonic() - began,
        facts,
    )


def promise_kept(result: RowResult) -> bool:
    """Issue 26's promise for the row, beyond the checker's verdict: every id the producer
    chose ran exactly once; the long-cut worker is still up and ran the jobs after the heal."""
    facts = result.facts
    if "ran_once" in facts:
        return bool(facts["producer_exit"] == 0 and facts["ran_once"] == facts["distinct"])
    return bool(
        facts["holder_up_after_heal"] and facts["fresh_started_by_holder"] == facts["fresh_jobs"]
    )
