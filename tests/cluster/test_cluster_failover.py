"""A primary dies and its replica is promoted while worker processes run: nothing acknowledged
to the producer (and replicated) vanishes; jobs completed just before the kill may run again,
because replication is asynchronous."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker.protocol.keys import QueueKeys, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.valkey.connection import connect
from tests.cluster.conftest import spread_queues
from tests.cluster.fleet import (
    all_done,
    completions,
    enqueue_spread,
    fail_over_mid_drain,
    fleet_dir,
    start_fleet,
    stop_fleet,
)
from tests.support.cluster import ClusterOfServers
from tests.support.processes import WorkerProcesses
from tests.support.wait import eventually_sync

PER_QUEUE = 300


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[ClusterOfServers]:
    with ClusterOfServers(tmp_path / "replicated", primaries=3, replicas=1) as servers:
        yield servers


def replicated_everything(cluster: ClusterOfServers) -> None:
    """Poll until every primary's replica has acknowledged its whole replication stream (WAIT
    would only cover this connection's own writes)."""
    for port in cluster.primary_ports():
        with cluster.node(port).client() as direct:

            def caught_up() -> bool:
                info = direct.info("replication")
                replica = info.get("slave0")
                return isinstance(replica, dict) and replica["offset"] >= info["master_repl_offset"]

            eventually_sync(caught_up, timeout=30, what=f"the replica of {port} to catch up")


@pytest.mark.fault
async def test_a_primary_failover_loses_no_replicated_job(
    replicated: ClusterOfServers, tmp_path: Path
) -> None:
    cluster = replicated
    placed = spread_queues(cluster, f"failover{os.getpid()}")
    queues = list(placed)
    slot = hash_slot(QueueKeys.of(queues[0]).pending)
    doomed = cluster.owner_port(slot)
    client: Redis = connect(cluster.url, DEFAULT_WIRE_VERSION)
    try:
        with WorkerProcesses(fleet_dir(tmp_path)) as fleet:
            workers = start_fleet(fleet, queues, cluster.url, count=3, concurrency=16)
            for worker in workers:
                await worker.wait_event("worker_started", within_s=30)
            queue_of: dict[JobId, str] = {}
            for queue in queues:
                for job_id in await enqueue_spread(client, [queue], PER_QUEUE, ms=20):
                    queue_of[job_id] = queue
            ids = list(queue_of)
            await anyio.to_thread.run_sync(replicated_everything, cluster)

            await fail_over_mid_drain(cluster, fleet, doomed, len(ids))
            assert cluster.owner_port(slot) != doomed, "no replica was promoted"
            ids += await enqueue_spread(client, queues, 50, ms=20)  # after the failover
            await all_done(fleet.ledger, ids, workers)
            await stop_fleet(workers)
            done = completions(fleet.ledger)
            assert set(ids) <= set(done), "a job vanished"
            twice = [job for job, times in done.items() if times > 1]
            # Only jobs of the failed primary's queues may run again (its unreplicated tail).
            doomed_queues = {q for q, port in placed.items() if port == doomed}
            assert {queue_of.get(JobId(job)) for job in twice} <= doomed_queues
    finally:
        await client.aclose()
