"""Real `emq-worker run` processes on a 3-primary cluster: six queues, two on each primary,
thousands of jobs; every job completes exactly once, also while a busy queue's slot moves."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker.jobs.producer import Producer
from emq_worker.protocol.keys import QueueKeys, hash_slot
from tests.cluster.conftest import spread_queues
from tests.cluster.fleet import (
    all_done,
    completions,
    enqueue_spread,
    fleet_dir,
    start_fleet,
    stop_fleet,
)
from tests.support.cluster import ClusterOfServers
from tests.support.processes import WorkerProcesses
from tests.support.wait import eventually

PER_QUEUE = 500


async def test_six_queues_over_three_primaries_every_job_completes_exactly_once(
    cluster: ClusterOfServers, cluster_client: Redis, tmp_path: Path
) -> None:
    placed = spread_queues(cluster, f"fleet{os.getpid()}")
    queues = list(placed)
    assert len(queues) == 6
    assert Counter(placed.values()) == dict.fromkeys(cluster.primary_ports(), 2)
    with WorkerProcesses(fleet_dir(tmp_path)) as fleet:
        workers = start_fleet(fleet, queues, cluster.url, count=3)
        for worker in workers:
            await worker.wait_event("worker_started", within_s=30)
        ids = await enqueue_spread(cluster_client, queues, PER_QUEUE)
        await all_done(fleet.ledger, ids, workers)
        await stop_fleet(workers)
        done = completions(fleet.ledger)
        assert len(ids) == len(set(ids)) == 6 * PER_QUEUE
        assert set(done) == set(ids)
        assert [job for job, times in done.items() if times != 1] == []
        by_process = Counter(entry.pid for entry in fleet.ledger.find("done"))
        # The three processes share the work: none is starved.
        assert {worker.pid for worker in workers} == set(by_process)
        assert min(by_process.values()) >= len(ids) // 20, by_process
    producer = Producer(cluster_client)
    for queue in queues:
        counts = await producer.queue(queue).counts()
        assert (counts.pending, counts.active, counts.completed) == (0, 0, PER_QUEUE)


@pytest.mark.fault
@pytest.mark.parametrize("batch", [10, 100_000], ids=["redis-cli-batches", "one-migrate"])
async def test_moving_a_busy_queues_slot_mid_run_loses_and_repeats_nothing(
    cluster: ClusterOfServers, cluster_client: Redis, tmp_path: Path, batch: int
) -> None:
    """The slot moves as `redis-cli --cluster reshard` moves it (MIGRATE 10 keys at a time), and
    in one atomic MIGRATE."""
    placed = spread_queues(cluster, f"moving{os.getpid()}.{batch}", per_node=1)
    queues = list(placed)
    busy = queues[0]
    slot = hash_slot(QueueKeys.of(busy).pending)
    source = cluster.owner_port(slot)
    target = next(port for port in cluster.primary_ports() if port != source)
    with WorkerProcesses(fleet_dir(tmp_path)) as fleet:
        workers = start_fleet(fleet, queues, cluster.url, count=3, concurrency=16)
        for worker in workers:
            await worker.wait_event("worker_started", within_s=30)
        ids = await enqueue_spread(cluster_client, [busy], 3000, ms=20)
        ids += await enqueue_spread(cluster_client, queues[1:], 200, ms=20)

        async def some_done() -> bool:
            return len(fleet.ledger.find("done")) >= 600

        await eventually(some_done, timeout=60, what="600 jobs done before the move")
        moved = await anyio.to_thread.run_sync(cluster.move_slot, slot, target, batch)
        assert moved > 0
        assert len(completions(fleet.ledger)) < len(ids), "the move came after the work"
        assert cluster.owner_port(slot) == target
        ids += await enqueue_spread(cluster_client, [busy], 200, ms=20)  # after the move
        await all_done(fleet.ledger, ids, workers)
        await stop_fleet(workers)
        done = completions(fleet.ledger)
        assert set(done) == set(ids)
        assert [job for job, times in done.items() if times != 1] == []
    counts = await Producer(cluster_client).queue(busy).counts()
    assert (counts.pending, counts.active) == (0, 0)
