"""A lost primary holds back only the queues whose slots it owned.

One worker process serves three queues, one per primary, while a producer in the test keeps
enqueuing to each; a primary is SIGKILLed and its replica promoted. The queues on the surviving
primaries must keep flowing: no job enqueued there around the kill waits over MAX_WAIT_S for its
handler to start (the chaos app's ledger stamps each start with the system-wide monotonic clock),
and no enqueue there fails or takes over MAX_WAIT_S. The worker logs `queue_failed` for the lost
node's queue only, never `beat_failed`.

Killed: the primary owning `{emq}:version` (the fence must not make that node a single point of
failure), and another one. The nodes run with `cluster-require-full-coverage no`: with Redis'
default every node refuses every slot until the replica leads, which no client can hide.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.jobs.producer import Producer
from emq_worker.protocol.keys import VERSION_KEY, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.partition_names import partition_names
from emq_worker.protocol.partitions import set_partitions
from emq_worker.valkey.connection import connect
from tests.chaos.faults import CHAOS_APP
from tests.chaos.ledger import START
from tests.cluster.conftest import spread_queues
from tests.support.cluster import ClusterOfServers
from tests.support.processes import REPO_ROOT, WorkerProcess, WorkerProcesses
from tests.support.wait import eventually

MAX_WAIT_S = 0.5
"""The promise: how much longer than before the kill a job enqueued on a surviving queue around
the kill may wait for its handler to start, or one enqueue there may take; a stall of the whole
worker or producer lasts until the failover, 1-2 s at a 1 s node timeout. (Waits, not gaps
between starts: a gap also counts the time this test's own producer was descheduled.) The slack
over it is measured: the longest wait or enqueue of the BASELINE_STARTS before the kill, this
machine's noise at that moment."""
BASELINE_STARTS = 20
"""Jobs started on every queue before the kill: the window that measures the slack."""
JOB_MS = 20
PACE_S = 0.01
"""The producer's pause between two enqueues on one queue (a rate, not a wait for a state)."""
PRODUCE_FOR_S = 110.0
"""Per queue: bounds the producer if the test fails to stop it. A time, not a count: 3 000
enqueues (about 30 s at PACE_S, less on the lost queue, whose enqueues fail fast) could run
out while a slow failover was still under way, and no job would start after it."""
AFTER_FAILOVER_S = 0.5
"""How long after the failover the flow is still measured."""


@pytest.fixture
def failing_over(tmp_path: Path) -> Iterator[ClusterOfServers]:
    extra = ("--repl-diskless-sync-delay", "0")  # replicas sync at once: the test waits for it
    with ClusterOfServers(
        tmp_path / "cluster", primaries=3, replicas=1, full_coverage=False, extra=extra
    ) as servers:
        servers.wait_replicas()
        yield servers


@dataclass(frozen=True, slots=True)
class Sent:
    queue: str
    at: float
    """time.monotonic() when the enqueue was called."""
    took: float
    job: str | None
    """None: the enqueue failed."""


@dataclass
class Traffic:
    """A producer task per queue: every enqueue, and when the worker's handlers started each
    job (the ledger, read on as it grows: re-reading it whole at every poll would slow the
    producer, which shares this event loop)."""

    producer: Producer
    ledger: Path
    sent: list[Sent] = field(default_factory=list)
    stopping: anyio.Event = field(default_factory=anyio.Event)
    started: dict[str, float] = field(default_factory=dict)
    _read: dict[Path, int] = field(default_factory=dict)

    async def produce(self, queue: str) -> None:
        give_up = time.monotonic() + PRODUCE_FOR_S
        while not self.stopping.is_set() and time.monotonic() < give_up:
            at = time.monotonic()
            job: str | None = None
            with contextlib.suppress(RedisError):  # the lost node's queue, until the failover
                job = (await self.producer.enqueue(queue, "work", {"ms": JOB_MS})).job_id
            self.sent.append(Sent(queue, at, time.monotonic() - at, job))
            await anyio.sleep(PACE_S)

    def read_ledger(self) -> dict[str, float]:
        """job id -> when its handler first started (the ledger read so far)."""
        for path in sorted(self.ledger.glob("ledger-*.jsonl")):
            with path.open("rb") as file:
                file.seek(self._read.get(path, 0))
                text = file.read()
            complete = text[: text.rfind(b"\n") + 1]
            self._read[path] = self._read.get(path, 0) + len(complete)
            for line in complete.decode().splitlines():
                event = json.loads(line)
                if event["kind"] == START:
                    self.started.setdefault(event["job"], float(event["mono"]))
        return self.started

    def starts(self, queue: str) -> list[float]:
        started = self.read_ledger()
        return [started[s.job] for s in self.sent if s.queue == queue and s.job in started]

    def since(self, at: float, queues: list[str]) -> dict[str, dict[str, object]]:
        """Per queue, for a failure message: the enqueues called after `at` (sent, failed,
        started) and the last start, relative to `at`."""
        started = self.read_ledger()
        report: dict[str, dict[str, object]] = {}
        for queue in queues:
            sent = [s for s in self.sent if s.queue == queue and s.at > at]
            starts = self.starts(queue)
            report[queue] = {
                "sent": len(sent),
                "failed": sum(s.job is None for s in sent),
                "started": sum(s.job in started for s in sent if s.job is not None),
                "last_start": round(max(starts) - at, 3) if starts else None,
            }
        return report

    def flow(self, queue: str, start: float, end: float) -> dict[str, float]:
        """Of the enqueues on `queue` called within [start, end]: the longest wait for a handler
        to start (until now, for a job not started), the longest enqueue, how many failed;
        and, for the record, the longest gap between job starts."""
        started, now = self.read_ledger(), time.monotonic()
        sent = [s for s in self.sent if s.queue == queue and start <= s.at <= end]
        waits = [started.get(s.job, now) - s.at for s in sent if s.job is not None]
        return {
            "wait": round(max(waits, default=0.0), 3),
            "enqueue": round(max((s.took for s in sent), default=0.0), 3),
            "failed": sum(s.job is None for s in sent),
            "gap": round(longest_gap(self.starts(queue), start, end), 3),
        }


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without one of `times`."""
    inside = sorted(t for t in times if start < t < end)
    points = [start, *inside, end]
    return max(b - a for a, b in pairwise(points))


def start_worker(processes: WorkerProcesses, queues: list[str], url: str) -> WorkerProcess:
    extra = [arg for queue in queues[1:] for arg in ("--queue", queue)]
    extra += ["--concurrency", "8", "--app", CHAOS_APP, "--app-dir", str(REPO_ROOT)]
    return processes.start(
        "worker", queue=queues[0], redis_url=url, lease_ms=10_000, beat_ms=200, extra=extra
    )


async def placement(
    cluster: ClusterOfServers, client: Redis, logical: str | None
) -> tuple[dict[str, int], list[str]]:
    """The queues traffic goes to (-> the port of their primary), and the names the worker is
    given: a queue per primary, or the 3 partitions of the partitioned queue `logical`."""
    if logical is None:
        placed = spread_queues(cluster, f"scope{os.getpid()}", per_node=1)
        return placed, list(placed)
    await set_partitions(client, logical, 3)
    names = [*partition_names(logical, 3), logical]  # the worker serves the logical name too
    return {name: cluster.owner_port(hash_slot(f"{{{name}}}")) for name in names}, [logical]


async def kill_under_traffic(
    cluster: ClusterOfServers, tmp_path: Path, doomed: int, logical: str | None = None
) -> None:
    """Kill the primary on port `doomed` while the worker and the producer run; assert the flow
    on the other primaries' queues and the worker's log."""
    client: Redis = connect(cluster.url, DEFAULT_WIRE_VERSION)
    served, given = await placement(cluster, client, logical)
    lost = {queue for queue, port in served.items() if port == doomed}
    queues = [queue for queue in served if queue != logical]
    survivors = [queue for queue in queues if queue not in lost]
    ledger = tmp_path / "fleet"
    traffic = Traffic(Producer(client), ledger)
    try:
        with WorkerProcesses(ledger) as processes:
            worker = start_worker(processes, given, cluster.url)
            await worker.wait_event("worker_started", within_s=30)
            async with anyio.create_task_group() as tasks:
                for queue in queues:
                    tasks.start_soon(traffic.produce, queue)
                baseline, window = await kill_and_fail_over(
                    cluster, doomed, traffic, queues, worker
                )
                traffic.stopping.set()
            await all_started(traffic, survivors, window[1])
            killed_at, end = window
            bound = MAX_WAIT_S + baseline_slack(traffic, survivors, (baseline, killed_at))
            failover_s = end - AFTER_FAILOVER_S - killed_at
            print(f"bound {bound:.3f} s; failover {failover_s:.3f} s")
            assert failover_s > bound, (
                f"the failover took {failover_s:.3f} s, within the bound {bound:.3f} s: a stall "
                "until the failover would pass unseen"
            )
            report = {queue: traffic.flow(queue, *window) for queue in survivors}
            print(f"surviving queues around the kill (s): {report}")
            stalled = {
                queue: flow
                for queue, flow in report.items()
                if worst(flow) > bound or flow["failed"]
            }
            assert not stalled, (
                f"surviving queues held back over {bound:.3f} s: {stalled}\n{worker_story(worker)}"
            )
            assert_only_lost_queues_failed(worker, lost)
    finally:
        await client.aclose()


def worst(flow: dict[str, float]) -> float:
    """The longest a job waited for its handler, or an enqueue took, in a flow."""
    return max(flow["wait"], flow["enqueue"])


def baseline_slack(traffic: Traffic, queues: list[str], window: tuple[float, float]) -> float:
    """The longest wait or enqueue on `queues` in `window` (before the kill): the slack."""
    return max(worst(traffic.flow(queue, *window)) for queue in queues)


async def all_started(traffic: Traffic, queues: list[str], end: float) -> None:
    """Wait (bounded) until every job enqueued on `queues` before `end` has started."""

    async def probe() -> bool:
        started = traffic.read_ledger()
        sent = [s for s in traffic.sent if s.queue in queues and s.at <= end and s.job]
        return all(s.job in started for s in sent)

    await eventually(probe, timeout=30, what="every job on the surviving queues started")


async def kill_and_fail_over(
    cluster: ClusterOfServers,
    doomed: int,
    traffic: Traffic,
    queues: list[str],
    worker: WorkerProcess,
) -> tuple[float, tuple[float, float]]:
    """Wait for jobs to flow on every queue, then for BASELINE_STARTS more on each, kill, wait
    for the failover and for jobs to flow again on every queue (the lost one included); returns
    when the baseline began and the window to measure."""

    async def flowing_since(since: float, count: int = 1) -> bool:
        return all(sum(t > since for t in traffic.starts(q)) >= count for q in queues)

    await eventually(lambda: flowing_since(0), timeout=30, what="jobs started on every queue")
    baseline = time.monotonic()
    await eventually(
        lambda: flowing_since(baseline, BASELINE_STARTS), timeout=30, what="the baseline's jobs"
    )
    killed_at = time.monotonic()
    cluster.kill(doomed)
    await anyio.to_thread.run_sync(cluster.wait_ready)
    assert doomed not in cluster.primary_ports(), "no replica was promoted"
    end = time.monotonic() + AFTER_FAILOVER_S
    try:
        await eventually(lambda: flowing_since(end), timeout=30, what="jobs started after failover")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n{traffic.since(end, queues)}\n{worker_story(worker)}"
        ) from None
    return baseline, (killed_at, end)


def worker_story(worker: WorkerProcess, last: int = 12) -> str:
    """For a failure message: whether the worker still runs, and its last events other than a
    job's claim, start or completion."""
    quiet = {"job_claimed", "job_started", "job_completed"}
    events = [e for e in worker.events() if e.get("event") not in quiet]
    lines = "\n".join(json.dumps(e) for e in events[-last:])
    return f"worker exit status {worker.returncode} (None: running); its last events:\n{lines}"


def assert_only_lost_queues_failed(worker: WorkerProcess, lost: set[str]) -> None:
    beat_failed = worker.find("beat_failed")
    assert not beat_failed, f"the whole beat backed off: {beat_failed[:3]}"
    failed = {event["queue"] for event in worker.find("queue_failed")}
    assert failed <= lost, f"queue_failed for queues on live primaries: {failed - lost}"


@pytest.mark.fault
async def test_losing_the_version_keys_primary_stalls_no_other_queue(
    failing_over: ClusterOfServers, tmp_path: Path
) -> None:
    version_owner = failing_over.owner_port(hash_slot(VERSION_KEY))
    await kill_under_traffic(failing_over, tmp_path, version_owner)


@pytest.mark.fault
async def test_losing_a_primary_backs_off_only_its_queues(
    failing_over: ClusterOfServers, tmp_path: Path
) -> None:
    version_owner = failing_over.owner_port(hash_slot(VERSION_KEY))
    doomed = next(port for port in failing_over.primary_ports() if port != version_owner)
    await kill_under_traffic(failing_over, tmp_path, doomed)


@pytest.mark.soak
async def test_losing_the_registrys_primary_stalls_no_other_partition(
    failing_over: ClusterOfServers, tmp_path: Path
) -> None:
    """A partitioned queue (3 partitions, one per primary; the worker given the logical name):
    the primary holding the `{emq}` slot, where the partition registry lives, is killed."""
    registry_owner = failing_over.owner_port(hash_slot(VERSION_KEY))
    await kill_under_traffic(failing_over, tmp_path, registry_owner, f"parts{os.getpid()}")
