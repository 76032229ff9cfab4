"""Flows under worker SIGKILLs: real `emq-worker run` processes over two queues run flow trees
(children in both queues, a nested level) while workers are killed mid-run and replaced. No
parent starts before its children are all done, and none is left waiting: every flow ends with
its root completed, and the queues, outboxes and flow records empty."""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from emq_worker import FlowJob, Producer
from emq_worker.protocol.flow_wire import outbox_key
from tests.support.processes import WorkerProcess, WorkerProcesses
from tests.support.wait import eventually

pytestmark = pytest.mark.fault

FLOWS = 24
LEASE_MS = 800
BEAT_MS = 100
KILLS = 3


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes


def child(rng: random.Random, queue: str) -> FlowJob:
    return FlowJob("sleep", {"ms": rng.randint(20, 400)}, queue=queue)


def tree(rng: random.Random, a: str, b: str) -> FlowJob:
    """A root in `a` with a child in each queue and a middle level in `b` over two leaves in
    `a`; a third of the trees ignore one child's death (none should die)."""
    middle = FlowJob(
        "flow_parent", {"children": 2}, queue=b, children=[child(rng, a), child(rng, a)]
    )
    ignore = rng.random() < 1 / 3
    children = [
        child(rng, a),
        FlowJob("sleep", {"ms": 300}, queue=b, on_failure="ignore" if ignore else "fail_parent"),
        middle,
    ]
    return FlowJob("flow_parent", {"children": len(children)}, children=children)


def start(workers: WorkerProcesses, name: str, queues: tuple[str, str], url: str) -> WorkerProcess:
    a, b = queues
    extra = ["--queue", b, "--max-attempts", "20", "--concurrency", "8"]
    return workers.start(
        name, queue=a, redis_url=url, lease_ms=LEASE_MS, beat_ms=BEAT_MS, extra=extra
    )


async def test_flows_survive_worker_kills_with_no_parent_early_and_none_stuck(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    rng = random.Random(20)
    queues = (queue_name, queue_name + ".b")
    producer = Producer(client)
    roots = [
        (await producer.enqueue_flow(queues[0], tree(rng, *queues))).job_id for _ in range(FLOWS)
    ]
    running = [start(workers, f"w{i}", queues, redis_url) for i in range(2)]
    for process in running:
        await process.wait_event("worker_started")
    for kill in range(KILLS):
        await workers.ledger.wait_for("start", roots[kill * FLOWS // (KILLS + 1)], within_s=30)
        victim = running.pop(0)
        victim.send(signal.SIGKILL)  # mid-run: it holds leases, maybe a parent's
        assert await victim.wait_exit(5) == -signal.SIGKILL
        running.append(start(workers, f"r{kill}", queues, redis_url))

    async def all_roots_completed() -> bool:
        return all(workers.ledger.find("done", root) for root in roots)

    await eventually(all_roots_completed, timeout=60, what=f"{FLOWS} roots completed")
    assert workers.ledger.find("early") == [], "a parent started before its children were done"
    kills = [e for e in workers.ledger.entries() if e.attempt > 1]
    assert kills, "no job was re-run: the kills hit nothing"

    async def queues_settled() -> bool:
        for name in queues:
            counts = await producer.queue(name).counts()
            if (counts.pending, counts.active, counts.scheduled, counts.dead) != (0, 0, 0, 0):
                return False
            if await client.llen(outbox_key(producer.queue(name))):
                return False
        return True

    await eventually(queues_settled, timeout=10, what="empty queues and outboxes")
    left = []
    for name in queues:
        left += [key async for key in client.scan_iter(match=f"emq:{{{name}}}:job:*")]
    assert [key for key in left if not key.endswith(b":receipt")] == []
