"""`emq-worker inspect` of flow jobs: a parent shows its children still out and those done; a
child shows its parent, where that parent is, and its failure policy."""

from __future__ import annotations

from emq_worker import FlowJob
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import Completion, Failure
from tests.support.conformance import RECEIPT_MS, held
from tests.test_admin_cli import as_json, cli, on_queue


async def a_flow_half_done(queue: Queue) -> tuple[str, str, str, str]:
    """A parent with three children: one completed, one dead (ignored), one still out."""
    children = [FlowJob(payload=b"a"), FlowJob(payload=b"b", on_failure="ignore")]
    children.append(FlowJob(payload=b"c", queue=queue.name + ".kids"))
    flow = await Producer(queue.client).enqueue_flow(
        queue.name, FlowJob(payload=b"parent", children=children)
    )
    jobs = {job.payload: job for job in (await queue.claim(5, 30_000)).jobs}
    await queue.settle([Completion(held(jobs[b"a"]))], RECEIPT_MS)
    await queue.settle([Failure(held(jobs[b"b"]), 0, 0, "gave up")], RECEIPT_MS)
    a, b, c = (child.job_id for child in flow.children)
    return flow.job_id, a, b, c


def test_inspect_shows_a_parents_children_and_a_childs_parent(
    redis_url: str, queue_name: str
) -> None:
    parent, a, b, c = on_queue(redis_url, queue_name, a_flow_half_done)
    shown = as_json(cli(redis_url, "inspect", parent, "--queue", queue_name, "--json"))
    assert shown["where"] == "awaiting_children"
    assert shown["flow"]["children_outstanding"] == 1
    assert shown["flow"]["children_completed"] == [a]
    assert shown["flow"]["children_ignored"] == {b: "gave up"}
    text = cli(redis_url, "inspect", parent, "--queue", queue_name).output
    assert "flow children  1 still out; 1 completed; 1 ignored" in text
    assert f"  ignored      {b}: gave up" in text

    kids = queue_name + ".kids"
    child = as_json(cli(redis_url, "inspect", c, "--queue", kids, "--json"))["flow"]
    assert (child["parent"], child["parent_queue"]) == (parent, queue_name)
    assert (child["parent_where"], child["parent_policy"]) == ("awaiting_children", "fp")
    text = cli(redis_url, "inspect", c, "--queue", kids).output
    assert f"flow parent    {parent} in queue '{queue_name}' (awaiting_children)" in text

    plain = on_queue(redis_url, queue_name, lambda q: Producer(q.client).enqueue_raw(q.name, b"x"))
    assert (
        as_json(cli(redis_url, "inspect", plain.job_id, "-q", queue_name, "--json"))["flow"] is None
    )
