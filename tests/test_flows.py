"""Flows on our own side: writing a flow (one call in one queue, parents first across queues),
the fan-in in settle and reap, the outbox sweep, the failure policies, nested trees, the depth
cap; script-level, with hand-driven claims and settles."""

from __future__ import annotations

import json
from typing import cast

import anyio
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from emq_worker import App, FlowError, FlowJob, FlowWriteError, JobContext, Producer, Worker
from emq_worker.jobs.children import children_failures, children_results
from emq_worker.observe.log import get_logger
from emq_worker.protocol.flow_wire import outbox_key, read_record, subkey
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, SettleStatus
from emq_worker.protocol.values import Completion, Failure
from emq_worker.runtime.outbox import OutboxSweep
from tests.support.conformance import RECEIPT_MS, Harness, held
from tests.support.running import worker_settings
from tests.support.wait import eventually

LEASE_MS = 60_000


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


def leaf(name: str, **extra: object) -> FlowJob:
    return FlowJob("work", {"name": name}, **extra)  # type: ignore[arg-type]


async def claim_all(queue: Queue) -> dict[str, ClaimedJob]:
    """Claim every ready job, by its kwargs' name (or its payload for a raw one)."""
    jobs = (await queue.claim(100, LEASE_MS)).jobs
    named = {}
    for job in jobs:
        envelope = json.loads(job.payload)
        named[envelope["kwargs"].get("name", job.id)] = job
    return named


async def complete(queue: Queue, job: ClaimedJob, value: object = None) -> None:
    stored = json.dumps({"value": value}).encode()
    [result] = await queue.settle([Completion(held(job), stored)], RECEIPT_MS)
    assert result.status is SettleStatus.OK, result


async def die(queue: Queue, job: ClaimedJob, error: str = "boom") -> None:
    [result] = await queue.settle([Failure(held(job), 0, 0, error)], RECEIPT_MS)
    assert (result.status, result.detail) == (SettleStatus.OK, "dead"), result


async def state(queue: Queue, job_id: str) -> str:
    return await queue.state_of(job_id)  # type: ignore[arg-type]


async def test_a_flow_in_one_queue_is_one_call_and_its_parent_waits(
    conf: Harness, client: Redis
) -> None:
    producer, queue = conf.producer, conf.queue
    await client.delete(queue.keys.wake)
    flow = await producer.enqueue_flow(
        queue.name, FlowJob("sum", children=[leaf("a"), leaf("b", on_failure="ignore")])
    )
    parent, (a, b) = flow.job_id, flow.children
    row = await conf.row(parent)
    assert row[b"state"] == b"awaiting_children"
    assert row[b"attempts"] == b"0"
    assert b"parent" not in row
    assert await client.get(subkey(queue, parent, "dependencies")) == b"2"
    assert await state(queue, parent) == "awaiting_children"
    assert sorted(await conf.members(queue.keys.pending)) == sorted([a.job_id, b.job_id])
    child = await conf.row(a.job_id)
    assert (child[b"state"], child[b"parent"], child[b"parent_policy"]) == (
        b"pending",
        parent.encode(),
        b"fp",
    )
    assert b"parent_queue" not in child
    assert (await conf.row(b.job_id))[b"parent_policy"] == b"id"
    assert json.loads(child[b"payload"])["flow_child"] is True
    assert await client.llen(queue.keys.wake) == 2  # one per job ready


async def test_the_last_child_releases_its_parent_and_the_parent_reads_the_results(
    conf: Harness, client: Redis
) -> None:
    queue = conf.queue
    flow = await conf.producer.enqueue_flow(
        queue.name, FlowJob("sum", children=[leaf("a"), leaf("b")])
    )
    parent = flow.job_id
    jobs = await claim_all(queue)
    await complete(queue, jobs["a"], 1)
    assert await state(queue, parent) == "awaiting_children"  # one child still out
    await client.delete(queue.keys.wake)
    await complete(queue, jobs["b"], {"n": 2})
    assert await state(queue, parent) == "pending"
    assert await client.llen(queue.keys.wake) == 1
    results = await children_results(queue, parent)
    assert results == {jobs["a"].id: 1, jobs["b"].id: {"n": 2}}
    [claimed] = (await queue.claim(5, LEASE_MS)).jobs
    assert claimed.id == parent
    await complete(queue, claimed)
    for name in ("dependencies", "processed", "failed", "unsuccessful"):
        assert not await conf.exists(subkey(queue, parent, name)), name


async def test_a_dead_child_fails_its_parent_which_its_later_completion_never_revives(
    conf: Harness, client: Redis
) -> None:
    queue = conf.queue
    flow = await conf.producer.enqueue_flow(
        queue.name, FlowJob("sum", children=[leaf("a"), leaf("b"), leaf("c")])
    )
    parent = flow.job_id
    jobs = await claim_all(queue)
    await complete(queue, jobs["a"])
    await die(queue, jobs["b"], "no stock")
    row = await conf.row(parent)
    assert row[b"state"] == b"dead"
    assert row[b"last_error"] == f"child {jobs['b'].id} failed: no stock".encode()
    assert await conf.members(queue.keys.dead) == sorted([parent, jobs["b"].id])
    assert (await conf.metric("failed"))[0] == 2
    await complete(queue, jobs["c"])
    assert await queue.reprocess(jobs["b"].id)  # an operator's dead retry of the child
    [again] = (await queue.claim(5, LEASE_MS)).jobs
    await complete(queue, again)
    # The count reached zero: EchoMQ's release would put the dead parent in pending (F3).
    assert await client.get(subkey(queue, parent, "dependencies")) == b"0"
    assert await state(queue, parent) == "dead"
    assert parent not in await conf.members(queue.keys.pending)
    record = await read_record(queue, parent)
    assert record.failed == {jobs["b"].id: b"no stock"}
    assert set(record.processed) == {jobs["a"].id, jobs["b"].id, jobs["c"].id}


async def test_an_ignored_death_counts_as_done_once_even_after_a_dead_retry(
    conf: Harness,
) -> None:
    queue = conf.queue
    flow = await conf.producer.enqueue_flow(
        queue.name,
        FlowJob("sum", children=[leaf("a", on_failure="ignore"), leaf("b"), leaf("c")]),
    )
    parent = flow.job_id
    jobs = await claim_all(queue)
    await die(queue, jobs["a"], "flaky")
    assert await children_failures(queue, parent) == {jobs["a"].id: "flaky"}
    assert await queue.reprocess(jobs["a"].id)  # an operator's dead retry: it runs again
    [again] = (await queue.claim(5, LEASE_MS)).jobs
    await complete(queue, again, "second time")
    await complete(queue, jobs["b"])
    # Counted once: c is still out, so the parent waits (a second count would release it).
    assert await state(queue, parent) == "awaiting_children"
    assert await children_failures(queue, parent) == {}
    await complete(queue, jobs["c"])
    assert await state(queue, parent) == "pending"
    assert (await children_results(queue, parent))[jobs["a"].id] == "second time"


async def test_a_nested_tree_releases_level_by_level_and_a_death_climbs_it(
    conf: Harness,
) -> None:
    queue = conf.queue
    tree = FlowJob("root", children=[FlowJob("mid", children=[leaf("x"), leaf("y")]), leaf("z")])
    flow = await conf.producer.enqueue_flow(queue.name, tree)
    mid = flow.children[0]
    assert await state(queue, mid.job_id) == "awaiting_children"
    jobs = await claim_all(queue)
    assert set(jobs) == {"x", "y", "z"}
    await complete(queue, jobs["x"], "x")
    await complete(queue, jobs["y"], "y")
    assert await state(queue, mid.job_id) == "pending"
    assert await state(queue, flow.job_id) == "awaiting_children"
    [mid_job] = (await queue.claim(5, LEASE_MS)).jobs
    await complete(queue, mid_job, "mid")
    await complete(queue, jobs["z"])
    assert await state(queue, flow.job_id) == "pending"
    assert (await children_results(queue, flow.job_id))[mid.job_id] == "mid"

    # A death at the bottom of a fresh tree fails every waiting level above it, in one call.
    flow = await conf.producer.enqueue_flow(queue.name, tree)
    jobs = await claim_all(queue)
    await die(queue, jobs["x"], "deep")
    mid_row, root_row = await conf.row(flow.children[0].job_id), await conf.row(flow.job_id)
    assert mid_row[b"state"] == root_row[b"state"] == b"dead"
    assert root_row[b"last_error"].startswith(f"child {flow.children[0].job_id} failed:".encode())


async def test_a_tree_deeper_than_the_cap_is_refused_before_any_write(conf: Harness) -> None:
    def chain(levels: int) -> FlowJob:
        job = leaf("bottom")
        for _ in range(levels - 1):
            job = FlowJob("up", children=[job])
        return job

    with pytest.raises(FlowError, match=r"deeper than 8 levels .*level 9"):
        await conf.producer.enqueue_flow(conf.queue.name, chain(9))
    assert [key async for key in conf.client.scan_iter(match=conf.keys.prefix + "*")] == []
    flow = await conf.producer.enqueue_flow(conf.queue.name, chain(8))
    assert await state(conf.queue, flow.job_id) == "awaiting_children"


async def test_a_flow_that_cannot_be_written_says_why_and_writes_nothing(conf: Harness) -> None:
    producer, name = conf.producer, conf.queue.name
    twice = conf.mint()
    with pytest.raises(FlowError, match=f"job id {twice} appears twice"):
        await producer.enqueue_flow(
            name, FlowJob("p", children=[leaf("a", job_id=twice), leaf("b", job_id=twice)])
        )
    with pytest.raises(FlowError, match="needs a task"):
        await producer.enqueue_flow(name, FlowJob("p", children=[FlowJob()]))
    taken = await conf.enqueue(b"already here")
    with pytest.raises(FlowWriteError, match=f"flow not written: job {taken} already exists"):
        await producer.enqueue_flow(name, FlowJob("p", children=[leaf("a", job_id=taken)]))
    assert await conf.members(conf.keys.pending) == [taken]


async def test_a_child_in_another_queue_reports_through_its_outbox(
    conf: Harness, client: Redis, queue_name: str
) -> None:
    parents, children = conf.queue, conf.producer.queue(queue_name + ".kids")
    flow = await conf.producer.enqueue_flow(
        parents.name,
        FlowJob("sum", children=[leaf("near"), leaf("far", queue=children.name)]),
    )
    _near, far = flow.children
    assert far.queue == children.name
    far_row = cast(dict[bytes, bytes], await client.hgetall(children.keys.job(far.job_id)))
    assert far_row[b"parent_queue"] == parents.name.encode()
    await complete(parents, (await claim_all(parents))["near"])
    await complete(children, (await claim_all(children))["far"], 7)
    assert await state(parents, flow.job_id) == "awaiting_children"  # not yet delivered
    [entry] = await client.lrange(outbox_key(children), 0, -1)
    fields = [parents.name.encode(), flow.job_id.encode(), far.job_id.encode(), b'{"value": 7}']
    assert entry == b"\0".join(fields)
    assert (await children.promote(10)).outbox == 1  # what tells the beat to sweep
    await client.delete(parents.keys.wake)
    with capture_logs() as logs:
        released = await OutboxSweep(get_logger()).sweep(children)
    assert released == 1
    assert [log["event"] for log in logs] == ["flow_delivered"]
    assert await state(parents, flow.job_id) == "pending"
    assert await client.llen(parents.keys.wake) == 1
    assert await client.llen(outbox_key(children)) == 0
    assert (await children_results(parents, flow.job_id))[far.job_id] == 7


async def test_an_outbox_entry_delivered_twice_counts_once(
    conf: Harness, client: Redis, queue_name: str
) -> None:
    parents, children = conf.queue, conf.producer.queue(queue_name + ".kids")
    far = [leaf(name, queue=children.name) for name in ("a", "b")]
    flow = await conf.producer.enqueue_flow(parents.name, FlowJob("sum", children=far))
    jobs = await claim_all(children)
    await complete(children, jobs["a"])
    [entry] = await client.lrange(outbox_key(children), 0, -1)
    sweep = OutboxSweep(get_logger())
    await sweep.sweep(children)
    await client.rpush(outbox_key(children), entry)  # a sweep that died before its ack
    await client.rpush(outbox_key(children), b"not an entry")
    with capture_logs() as logs:
        await sweep.sweep(children)
    assert "flow_entry_unreadable" in [log["event"] for log in logs]
    assert await state(parents, flow.job_id) == "awaiting_children"
    assert await client.get(subkey(parents, flow.job_id, "dependencies")) == b"1"
    assert await client.llen(outbox_key(children)) == 0


async def test_a_part_in_another_queue_that_fails_leaves_its_parent_held(
    conf: Harness, queue_name: str
) -> None:
    parents, children = conf.queue, conf.producer.queue(queue_name + ".kids")
    taken = conf.mint()
    await conf.producer.enqueue_raw(children.name, b"in the way", job_id=taken)
    flow = FlowJob("sum", children=[leaf("near"), leaf("far", queue=children.name, job_id=taken)])
    with pytest.raises(FlowWriteError, match=r"only in part: the part in queue .*kids") as caught:
        await conf.producer.enqueue_flow(parents.name, flow)
    [(queue, ids)] = caught.value.written
    assert queue == parents.name
    root = ids[0]
    assert root in str(caught.value)
    assert await state(parents, root) == "awaiting_children"
    await complete(parents, (await claim_all(parents))["near"])
    assert await state(parents, root) == "awaiting_children"  # fail-closed: never released


async def test_a_child_the_reaper_dead_letters_fails_its_parent(conf: Harness) -> None:
    queue = conf.queue
    flow = await conf.producer.enqueue_flow(queue.name, FlowJob("p", children=[leaf("a")]))
    await queue.claim(1, 1)  # a lease of 1 ms: lapsed at the server's next millisecond

    async def reaped_dead() -> bool:
        return (await queue.reap(10, max_attempts=1)).dead == 1

    await eventually(reaped_dead, what="the reaper dead-lettered the child")
    row = await conf.row(flow.job_id)
    assert row[b"state"] == b"dead"
    assert b"lease expired" in row[b"last_error"]


async def test_removing_a_parent_removes_its_record_and_its_children_count_nothing(
    conf: Harness, client: Redis
) -> None:
    queue = conf.queue
    flow = await conf.producer.enqueue_flow(queue.name, FlowJob("p", children=[leaf("a")]))
    assert await queue.remove(flow.job_id)
    assert not await conf.exists(subkey(queue, flow.job_id, "dependencies"))
    await complete(queue, (await claim_all(queue))["a"])
    assert [key async for key in client.scan_iter(match=f"{queue.keys.job(flow.job_id)}*")] == []


async def test_the_producer_accepts_raw_payloads_in_a_flow(client: Redis, queue_name: str) -> None:
    producer = Producer(client)
    flow = await producer.enqueue_flow(
        queue_name, FlowJob(payload=b"parent", children=[FlowJob(payload=b"child")])
    )
    queue = producer.queue(queue_name)
    [job] = (await queue.claim(5, LEASE_MS)).jobs
    assert job.payload == b"child"
    await queue.settle([Completion(held(job))], RECEIPT_MS)
    assert await children_results(queue, flow.job_id) == {job.id: job.id.encode()}
    with pytest.raises(FlowError, match="raw payload takes no task"):
        await producer.enqueue_flow(queue_name, FlowJob("t", payload=b"x"))


async def test_a_burst_worker_runs_a_parent_its_last_sweep_released_before_it_exits(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    kids = queue_name + ".kids"
    ran: list[str] = []
    app = App()

    @app.task
    async def step(ctx: JobContext, name: str) -> str:
        ran.append(name)
        return name

    producer = Producer(client)
    root = FlowJob(
        "step", {"name": "parent"}, children=[FlowJob("step", {"name": "child"}, queue=kids)]
    )
    flow = await producer.enqueue_flow(queue_name, root)
    worker = Worker(worker_settings((queue_name, kids), redis_url, burst=True), app)
    with anyio.fail_after(20):
        await worker.run()
    assert ran == ["child", "parent"]
    assert await producer.queue(queue_name).state_of(flow.job_id) == "absent"
