"""A flow caught halfway, for the tests that show one (inspect, the dashboard)."""

from __future__ import annotations

from emq_worker import FlowJob, Producer
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import Completion, Failure
from tests.support.conformance import RECEIPT_MS, held


async def half_done_flow(queue: Queue, error: str = "gave up") -> tuple[str, str, str, str]:
    """A parent with three children: `a` completed, `b` dead with `error` (its failure
    ignored), `c` (in the queue `<queue>.kids`) still out. Their ids: parent, a, b, c."""
    children = [FlowJob(payload=b"a"), FlowJob(payload=b"b", on_failure="ignore")]
    children.append(FlowJob(payload=b"c", queue=queue.name + ".kids"))
    flow = await Producer(queue.client).enqueue_flow(
        queue.name, FlowJob(payload=b"parent", children=children)
    )
    jobs = {job.payload: job for job in (await queue.claim(5, 30_000)).jobs}
    await queue.settle([Completion(held(jobs[b"a"]))], RECEIPT_MS)
    await queue.settle([Failure(held(jobs[b"b"]), 0, 0, error)], RECEIPT_MS)
    a, b, c = (child.job_id for child in flow.children)
    return flow.job_id, a, b, c
