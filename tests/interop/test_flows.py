"""Flows shared with EchoMQ: its flow add, complete, retry and Pump delivery (restated in
tests/interop/echomq/flows.py) beside our producer, settle and beat, on the same queues. An
EchoMQ parent released by our completions (one queue, and across queues through our beat's
sweep or its Pump), an emq-worker parent released by EchoMQ's completions, a nested tree, both
failure policies each way, and the depth cap."""

from __future__ import annotations

from typing import cast

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, FlowError, FlowJob, JobContext
from emq_worker.protocol.flow_wire import outbox_key
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import SettleStatus
from emq_worker.protocol.values import Completion, Failure
from tests.interop.echomq import EchoMQ
from tests.interop.echomq.flows import EchoMQFlows, FlowTooDeepError, Node
from tests.support.conformance import LEASE_MS, RECEIPT_MS, Harness, held
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


@pytest.fixture
def flows(client: Redis) -> EchoMQFlows:
    return EchoMQFlows(client)


class Recorder:
    """A raw handler for several queues: a child returns `<payload>-done` (the bytes its parent
    records); a job whose payload starts with b"parent" records what it reads of its children,
    ours and EchoMQ's reads alike."""

    def __init__(self, flows: EchoMQFlows) -> None:
        self.flows = flows
        self.order: list[bytes] = []
        self.seen: dict[bytes, tuple[dict[JobId, object], dict[str, bytes]]] = {}

    def app(self, *queues: str) -> App:
        app = App()
        for queue in queues:
            app.raw_handler(queue)(self.run)
        return app

    async def run(self, ctx: JobContext) -> bytes:
        self.order.append(ctx.payload)
        if ctx.payload.startswith(b"parent"):
            theirs = await self.flows.children_values(ctx.queue, ctx.job_id)
            self.seen[ctx.payload] = (dict(await ctx.children_results()), theirs)
        return ctx.payload + b"-done"


async def state(client: Redis, queue: str, job_id: str) -> bytes | None:
    return cast(bytes | None, await client.hget(QueueKeys.of(queue).job(job_id), "state"))


async def test_an_echomq_parent_is_released_by_our_completions_in_its_queue(
    conf: Harness, flows: EchoMQFlows, redis_url: str
) -> None:
    q = conf.queue.name
    parent, a, b = conf.mint(), conf.mint(), conf.mint()
    await flows.add(q, Node(parent, b"parent", children=(Node(a, b"a"), Node(b, b"b"))))
    recorder = Recorder(flows)
    async with running_worker(worker_settings(q, redis_url), recorder.app(q)):
        await eventually(lambda: _done(recorder, b"parent"), what="the parent ran")
    assert recorder.order[-1] == b"parent"
    ours, theirs = recorder.seen[b"parent"]
    assert ours == {a: b"a-done", b: b"b-done"}
    assert theirs == {a: b"a-done", b: b"b-done"}  # EchoMQ's children_values reads the same
    await eventually(lambda: _gone(conf, parent), what="the parent completed")


async def _done(recorder: Recorder, payload: bytes) -> bool:
    return payload in recorder.seen


async def _gone(conf: Harness, job_id: str) -> bool:
    return await conf.row(job_id) == {}


async def test_an_echomq_parent_in_another_queue_is_released_by_our_beat(
    conf: Harness, flows: EchoMQFlows, redis_url: str, client: Redis
) -> None:
    parents, kids = conf.queue.name, conf.queue.name + ".kids"
    parent, a, b = conf.mint(), conf.mint(), conf.mint()
    root = Node(parent, b"parent", children=(Node(a, b"a", kids), Node(b, b"b", kids)))
    await flows.add(parents, root)
    recorder = Recorder(flows)
    async with running_worker(worker_settings(kids, redis_url), recorder.app(kids)):
        await eventually(lambda: _in_state(client, parents, parent, b"pending"), what="release")
    echomq = EchoMQ.of(client, parents)
    job = await echomq.claim(LEASE_MS)  # EchoMQ's consumer takes its parent
    assert job is not None
    assert job.id == parent
    assert await flows.children_values(parents, parent) == {a: b"a-done", b: b"b-done"}
    assert await flows.complete(parents, parent, job.token) == "ok"
    assert await client.llen(outbox_key(Queue(client, conf.queue.scripts, kids))) == 0


async def _in_state(client: Redis, queue: str, job_id: str, wanted: bytes) -> bool:
    return await state(client, queue, job_id) == wanted


async def test_echomqs_pump_delivers_what_our_settle_puts_in_the_outbox(
    conf: Harness, flows: EchoMQFlows, client: Redis
) -> None:
    parents, kids = conf.queue.name, conf.queue.name + ".kids"
    parent, a, b = conf.mint(), conf.mint(), conf.mint()
    root = Node(parent, b"parent", children=(Node(a, b"a", kids), Node(b, b"b", kids, "id")))
    await flows.add(parents, root)
    ours = conf.producer.queue(kids)
    jobs = {job.id: job for job in (await ours.claim(5, LEASE_MS)).jobs}
    await ours.settle([Completion(held(jobs[a]), b"ra")], RECEIPT_MS)
    await ours.settle([Failure(held(jobs[b]), 0, 0, "gave up")], RECEIPT_MS)
    assert await flows.pump(kids) == 2  # EchoMQ's own parser reads both of our entries
    assert await state(client, parents, parent) == b"pending"
    assert await flows.children_values(parents, parent) == {a: b"ra"}
    unsuccessful = await client.hgetall(QueueKeys.of(parents).job(parent) + ":unsuccessful")
    assert unsuccessful == {b.encode(): b"gave up"}


async def test_our_parent_is_released_by_echomqs_completions(
    conf: Harness, flows: EchoMQFlows, redis_url: str, client: Redis
) -> None:
    q, kids = conf.queue.name, conf.queue.name + ".kids"
    near = FlowJob(payload=b"near")
    far = FlowJob(payload=b"far", queue=kids)
    flow = await conf.producer.enqueue_flow(q, FlowJob(payload=b"parent", children=[near, far]))
    echo_near, echo_far = EchoMQ.of(client, q), EchoMQ.of(client, kids)
    for echomq, queue in ((echo_near, q), (echo_far, kids)):
        job = await echomq.claim(LEASE_MS)
        assert job is not None
        assert await flows.complete(queue, job.id, job.token, job.payload + b" by echomq") == "ok"
    # The one-queue child released nothing yet (one child is still out); the other-queue one
    # waits in its outbox for a sweep: ours, since our worker serves both queues.
    assert await state(client, q, flow.job_id) == b"awaiting_children"
    recorder = Recorder(flows)
    async with running_worker(worker_settings((q, kids), redis_url), recorder.app(q, kids)):
        await eventually(lambda: _done(recorder, b"parent"), what="our parent ran")
    ours, _ = recorder.seen[b"parent"]
    assert ours == {
        flow.children[0].job_id: b"near by echomq",
        flow.children[1].job_id: b"far by echomq",
    }


async def test_a_nested_echomq_tree_runs_through_our_worker_bottom_up(
    conf: Harness, flows: EchoMQFlows, redis_url: str
) -> None:
    q, other = conf.queue.name, conf.queue.name + ".other"
    ids = [conf.mint() for _ in range(5)]
    mid = Node(ids[1], b"parent-mid", other, children=(Node(ids[2], b"x"), Node(ids[3], b"y", q)))
    root = Node(ids[0], b"parent-root", children=(mid, Node(ids[4], b"z")))
    await flows.add(q, root)
    recorder = Recorder(flows)
    async with running_worker(worker_settings((q, other), redis_url), recorder.app(q, other)):
        await eventually(lambda: _done(recorder, b"parent-root"), what="the root ran")
    order = recorder.order
    assert order.index(b"parent-mid") > max(order.index(b"x"), order.index(b"y"))
    assert order[-1] == b"parent-root"
    assert recorder.seen[b"parent-root"][0] == {ids[1]: b"parent-mid-done", ids[4]: b"z-done"}


async def test_our_nested_tree_is_released_by_echomqs_completions_and_pump(
    conf: Harness, flows: EchoMQFlows, client: Redis
) -> None:
    q, other = conf.queue.name, conf.queue.name + ".other"
    mid = FlowJob(payload=b"mid", queue=other, children=[FlowJob(payload=b"x")])
    flow = await conf.producer.enqueue_flow(q, FlowJob(payload=b"root", children=[mid]))
    echo_other = EchoMQ.of(client, other)
    for expected in (b"x", b"mid"):  # bottom up: the leaf, then the middle once released
        job = await echo_other.claim(LEASE_MS)
        assert job is not None
        assert job.payload == expected
        assert await flows.complete(other, job.id, job.token) == "ok"
    assert await state(client, q, flow.job_id) == b"awaiting_children"
    assert await flows.pump(other) == 1
    assert await state(client, q, flow.job_id) == b"pending"


async def test_our_dead_child_fails_or_frees_an_echomq_parent_by_its_policy(
    conf: Harness, flows: EchoMQFlows, client: Redis
) -> None:
    q, ours = conf.queue.name, conf.queue
    failing, freed = conf.mint(), conf.mint()
    x, y, z = conf.mint(), conf.mint(), conf.mint()
    await flows.add(q, Node(failing, b"p1", children=(Node(x, b"x"),)))
    await flows.add(q, Node(freed, b"p2", children=(Node(y, b"y", policy="id"), Node(z, b"z"))))
    jobs = {job.id: job for job in (await ours.claim(5, LEASE_MS)).jobs}
    for job_id in (x, y):
        [result] = await ours.settle([Failure(held(jobs[job_id]), 0, 0, "boom")], RECEIPT_MS)
        assert result.detail == "dead"
    assert await state(client, q, failing) == b"dead"
    assert await state(client, q, freed) == b"awaiting_children"
    [result] = await ours.settle([Completion(held(jobs[z]))], RECEIPT_MS)
    assert result.status is SettleStatus.OK
    assert await state(client, q, freed) == b"pending"
    assert await flows.children_values(q, freed) == {z: z.encode()}  # no value: its id


async def test_echomqs_dead_child_fails_or_frees_our_parent_by_its_policy(
    conf: Harness, flows: EchoMQFlows, client: Redis
) -> None:
    q = conf.queue.name
    fail = await conf.producer.enqueue_flow(
        q, FlowJob(payload=b"p1", children=[FlowJob(payload=b"x")])
    )
    free = await conf.producer.enqueue_flow(
        q, FlowJob(payload=b"p2", children=[FlowJob(payload=b"y", on_failure="ignore")])
    )
    echomq = EchoMQ.of(client, q)
    for job in await echomq.claim_batch(5, LEASE_MS):
        verdict = await flows.retry(q, job.id, job.token, delay_ms=0, max_attempts=1, error="no")
        assert verdict == "dead"
    assert await state(client, q, fail.job_id) == b"dead"
    assert await state(client, q, free.job_id) == b"pending"
    failures = await conf.producer.queue(q).client.hgetall(
        QueueKeys.of(q).job(free.job_id) + ":unsuccessful"
    )
    assert failures == {free.children[0].job_id.encode(): b"no"}


async def test_the_depth_cap_is_echomqs_on_both_sides(
    conf: Harness, flows: EchoMQFlows, redis_url: str
) -> None:
    q = conf.queue.name

    def theirs(levels: int) -> Node:
        node = Node(conf.mint(), b"leaf")
        for level in range(levels - 1):
            node = Node(conf.mint(), b"parent-%d" % level, children=(node,))
        return node

    def ours(levels: int) -> FlowJob:
        job = FlowJob(payload=b"leaf")
        for _ in range(levels - 1):
            job = FlowJob(payload=b"up", children=[job])
        return job

    with pytest.raises(FlowTooDeepError):
        await flows.add(q, theirs(9))
    with pytest.raises(FlowError, match="deeper than 8 levels"):
        await conf.producer.enqueue_flow(q, ours(9))
    assert [key async for key in conf.client.scan_iter(match=conf.keys.prefix + "*")] == []
    await flows.add(q, theirs(8))  # the deepest tree either side writes runs to its root
    recorder = Recorder(flows)
    async with running_worker(worker_settings(q, redis_url), recorder.app(q)):
        await eventually(lambda: _done(recorder, b"parent-6"), what="the root ran")
    assert recorder.order == [b"leaf", *(b"parent-%d" % level for level in range(7))]
    with anyio.fail_after(5):
        assert (await conf.queue.counts()).pending == 0
