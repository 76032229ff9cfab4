"""A fleet for cluster tests: worker processes serving every queue, a producer, and the ledger
checks (every job completed exactly once / at least once)."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio
from redis.asyncio import Redis

from emq_worker.jobs.producer import JobSpec, Producer
from emq_worker.protocol.names import JobId
from tests.support.cluster import ClusterOfServers
from tests.support.processes import Ledger, WorkerProcess, WorkerProcesses
from tests.support.wait import eventually

BATCH = 250
LEASE_MS = 10_000
BEAT_MS = 200


async def enqueue_spread(
    client: Redis, queues: Sequence[str], per_queue: int, *, ms: int = 1
) -> list[JobId]:
    """`per_queue` jobs of the ledger app's `sleep` task on each queue, in batches."""
    producer = Producer(client)
    ids: list[JobId] = []
    for start in range(0, per_queue, BATCH):
        for queue in queues:
            specs = [JobSpec("sleep", {"ms": ms})] * min(BATCH, per_queue - start)
            ids += [entry.job_id for entry in await producer.enqueue_many(queue, specs)]
    return ids


def start_fleet(
    fleet: WorkerProcesses, queues: Sequence[str], url: str, count: int, concurrency: int = 32
) -> list[WorkerProcess]:
    extra = [arg for queue in queues[1:] for arg in ("--queue", queue)]
    extra += ["--concurrency", str(concurrency)]
    return [
        fleet.start(
            f"worker{n}",
            queue=queues[0],
            redis_url=url,
            lease_ms=LEASE_MS,
            beat_ms=BEAT_MS,
            extra=extra,
        )
        for n in range(count)
    ]


async def all_done(ledger: Ledger, ids: Sequence[JobId], workers: Sequence[WorkerProcess]) -> None:
    """Wait until every id has a `done` line; fail early naming a worker that died."""
    wanted = set(ids)

    async def probe() -> bool:
        for worker in workers:
            if worker.returncode is not None:
                raise AssertionError(f"a worker exited mid-run\n{worker.tail()}")
        done = {entry.job_id for entry in ledger.find("done")}
        return wanted <= done

    try:
        await eventually(probe, timeout=90, what=f"{len(wanted)} jobs done")
    except AssertionError as exc:
        missing = len(wanted - {entry.job_id for entry in ledger.find("done")})
        tails = "\n".join(worker.tail() for worker in workers)
        raise AssertionError(f"{exc}\n{missing} jobs never done\n{tails}") from None


def completions(ledger: Ledger) -> Counter[str]:
    return Counter(entry.job_id for entry in ledger.find("done"))


async def stop_fleet(workers: Sequence[WorkerProcess]) -> None:
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert await worker.wait_exit(30) == 0, worker.tail()


async def fail_over_mid_drain(
    cluster: ClusterOfServers, fleet: WorkerProcesses, doomed: int, jobs: int
) -> None:
    """Once a quarter of `jobs` are done, kill the primary on port `doomed` and wait until its
    replica leads."""

    async def some_done() -> bool:
        return len(fleet.ledger.find("done")) >= jobs // 4

    await eventually(some_done, timeout=60, what="a quarter of the jobs done")
    cluster.kill(doomed)
    await anyio.to_thread.run_sync(cluster.wait_ready)


def fleet_dir(tmp_path: Path) -> Path:
    return tmp_path / "fleet"
