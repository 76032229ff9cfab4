"""A partitioned queue on a 3-primary cluster: two worker processes given the logical name drain
its 6 partitions, every job once, and no primary spends over half of the Redis CPU the drain
cost (one unpartitioned queue puts it all on one primary); a primary's failover mid-drain loses
no replicated job."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker.jobs.producer import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.partition_names import partition_names
from emq_worker.protocol.partitions import set_partitions
from emq_worker.valkey.connection import connect
from tests.cluster.fleet import (
    all_done,
    completions,
    fail_over_mid_drain,
    fleet_dir,
    start_fleet,
    stop_fleet,
)
from tests.cluster.test_cluster_failover import replicated_everything
from tests.support.cluster import ClusterOfServers
from tests.support.commands import OBSERVER_COMMANDS
from tests.support.processes import WorkerProcess, WorkerProcesses

PARTITIONS = 6
JOBS = 4_000
BATCH = 250
MOST_CPU_SHARE = 0.5
"""The promise: no primary spends more than half of the drain's Redis CPU."""


def cpu_s(cluster: ClusterOfServers) -> dict[int, float]:
    """Each primary's Redis CPU so far (used_cpu_sys + used_cpu_user, s)."""
    spent = {}
    for port in cluster.primary_ports():
        with cluster.node(port).client() as direct:
            info = direct.info("cpu")
        spent[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return spent


def calls(cluster: ClusterOfServers) -> int:
    """Commands the primaries ran so far (those inside scripts included), the counting left out."""
    total = 0
    for port in cluster.primary_ports():
        with cluster.node(port).client() as direct:
            stats = direct.info("commandstats")
        total += sum(
            int(fields["calls"])
            for name, fields in stats.items()
            if name.removeprefix("cmdstat_") not in OBSERVER_COMMANDS
        )
    return total


async def enqueue(client: Redis, queue: str, count: int, ms: int = 0) -> list[JobId]:
    """`count` jobs of the ledger app's `sleep` task, addressed to the logical name."""
    producer = Producer(client)
    ids: list[JobId] = []
    for start in range(0, count, BATCH):
        specs = [JobSpec("sleep", {"ms": ms})] * min(BATCH, count - start)
        ids += [entry.job_id for entry in await producer.enqueue_many(queue, specs)]
    return ids


async def started(fleet: WorkerProcesses, queue: str, url: str) -> list[WorkerProcess]:
    workers = start_fleet(fleet, [queue], url, count=2, concurrency=32)
    for worker in workers:
        await worker.wait_event("worker_started", within_s=30)
    return workers


async def drain_shares(
    cluster: ClusterOfServers, tmp_path: Path, queue: str, partitions: int
) -> dict[int, float]:
    """Drain JOBS addressed to `queue` split `partitions` ways with two worker processes: each
    primary's share of the Redis CPU spent from the first enqueue to the last completion."""
    client: Redis = connect(cluster.url, DEFAULT_WIRE_VERSION)
    try:
        await set_partitions(client, queue, partitions)
        with WorkerProcesses(fleet_dir(tmp_path / queue)) as fleet:
            workers = await started(fleet, queue, cluster.url)
            before, called = cpu_s(cluster), calls(cluster)
            ids = await enqueue(client, queue, JOBS)
            await all_done(fleet.ledger, ids, workers)
            after, called = cpu_s(cluster), calls(cluster) - called
            await stop_fleet(workers)
            done = completions(fleet.ledger)
    finally:
        await client.aclose()
    assert set(done) == set(ids), "a job lost"
    assert max(done.values()) == 1, "a job run twice"
    spent = {port: after[port] - before[port] for port in after}
    shares = {port: round(s / sum(spent.values()), 3) for port, s in spent.items()}
    per_job_us = round(sum(spent.values()) / JOBS * 1e6, 1)
    print(
        f"{partitions} partition(s), {JOBS} jobs: Redis CPU s per primary {spent}, shares "
        f"{shares}; {per_job_us} us and {called / JOBS:.1f} commands per job in all"
    )
    return shares


@pytest.mark.fault
async def test_six_partitions_spread_the_redis_cpu_over_three_primaries(
    cluster: ClusterOfServers, tmp_path: Path
) -> None:
    queue = f"spread{os.getpid()}"
    owners = {
        cluster.owner_port(hash_slot(QueueKeys.of(name).pending))
        for name in partition_names(queue, PARTITIONS)
    }
    assert owners == set(cluster.primary_ports())  # the naming rule reached every primary
    one = await drain_shares(cluster, tmp_path, f"{queue}.one", 1)
    assert max(one.values()) > 2 / 3, one  # the measure sees a queue on one primary
    six = await drain_shares(cluster, tmp_path, queue, PARTITIONS)
    assert max(six.values()) <= MOST_CPU_SHARE, six


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[ClusterOfServers]:
    with ClusterOfServers(tmp_path / "replicated", primaries=3, replicas=1) as servers:
        yield servers


@pytest.mark.fault
async def test_a_primary_failover_mid_drain_of_a_partitioned_queue_loses_nothing(
    replicated: ClusterOfServers, tmp_path: Path
) -> None:
    cluster = replicated
    queue = f"failover{os.getpid()}"
    first = partition_names(queue, PARTITIONS)[0]
    doomed = cluster.owner_port(hash_slot(QueueKeys.of(first).pending))
    client: Redis = connect(cluster.url, DEFAULT_WIRE_VERSION)
    try:
        await set_partitions(client, queue, PARTITIONS)
        with WorkerProcesses(fleet_dir(tmp_path)) as fleet:
            workers = await started(fleet, queue, cluster.url)
            ids = await enqueue(client, queue, 1_800, ms=5)
            await anyio.to_thread.run_sync(replicated_everything, cluster)

            await fail_over_mid_drain(cluster, fleet, doomed, len(ids))
            ids += await enqueue(client, queue, 300, ms=5)  # after the failover
            await all_done(fleet.ledger, ids, workers)
            await stop_fleet(workers)
            done = completions(fleet.ledger)
    finally:
        await client.aclose()
    assert set(ids) <= set(done), "a job vanished"
    for worker in workers:
        assert await worker.wait_exit(30) == 0, worker.tail()
