"""`flow:held`: the flow parents our flow script holds, the list the dashboard's waiting tab
reads instead of walking the keyspace. A parent is a member from its flow until it is
released or failed by a child, or removed; obliterate deletes the list."""

from __future__ import annotations

from redis.asyncio import Redis

from emq_worker import FlowJob, Producer
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, text
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion, HeldLease

LEASE_MS = 30_000


async def held(queue: Queue) -> list[str]:
    return [text(m) for m in await queue.client.zrange(queue.keys.prefix + "flow:held", 0, -1)]


def lease(job: ClaimedJob) -> HeldLease:
    return HeldLease(job.id, job.token, job.nonce)


async def claimed(queue: Queue, job_id: JobId) -> ClaimedJob:
    """`job_id` leased; the other jobs claimed with it are released."""
    jobs = (await queue.claim(10, LEASE_MS)).jobs
    await queue.release([lease(job) for job in jobs if job.id != job_id])
    [wanted] = [job for job in jobs if job.id == job_id]
    return wanted


async def test_a_parent_is_held_until_its_children_release_it(
    client: Redis, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    flow = await Producer(client).enqueue_flow(
        queue_name, FlowJob("ship", children=[FlowJob("pack"), FlowJob("pack")])
    )
    assert await held(queue) == [flow.job_id]
    for child in flow.children:
        await queue.settle([Completion(lease(await claimed(queue, child.job_id)))], 1000)
    assert await queue.state_of(flow.job_id) == "pending"
    assert await held(queue) == []


async def test_a_parent_failed_by_a_child_or_removed_leaves_the_list(
    client: Redis, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    producer = Producer(client)
    failed = await producer.enqueue_flow(queue_name, FlowJob("ship", children=[FlowJob("pack")]))
    removed = await producer.enqueue_flow(queue_name, FlowJob("ship", children=[FlowJob("pack")]))
    assert sorted(await held(queue)) == sorted([failed.job_id, removed.job_id])
    child = await claimed(queue, failed.children[0].job_id)
    await queue.fail(lease(child), 1000, delay_ms=0, max_attempts=0, error="broken")
    assert await queue.state_of(failed.job_id) == "dead"
    assert await held(queue) == [removed.job_id]
    await queue.remove(removed.job_id)
    assert await held(queue) == []
