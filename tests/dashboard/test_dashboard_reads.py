"""What the read side of issue 28 adds to the pages, over HTTP against the real test server: a
job's return value, flow parents waiting for their children, jobs waiting in lanes, and the
retries apart from the plain delayed jobs."""

from __future__ import annotations

import html

from redis.asyncio import Redis

from emq_worker.jobs.producer import Producer
from emq_worker.jobs.results import encode_result
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion, HeldLease
from tests.dashboard.test_dashboard_http import browsing

RESULT_TTL_MS = 60_000


async def test_a_completed_jobs_return_value_is_on_its_page_and_in_its_json(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    job_id = (await Producer(client).enqueue(queue_name, "charge", {"order": "A-1"})).job_id
    [job] = (await queue.claim(1, 30_000)).jobs
    value = {"charged": 1200, "note": "<b>paid</b>"}
    stored, _ = encode_result(value)
    lease = HeldLease(job.id, job.token, job.nonce)
    await queue.settle([Completion(lease, stored, RESULT_TTL_MS)], 1000)
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue_name}/jobs/{job_id}")
        api = await http.get(f"/api/queues/{queue_name}/jobs/{job_id}")
    assert page.status_code == 200, page.text[-300:]
    assert '<pre class="result">' in page.text
    assert html.escape("<b>paid</b>") in page.text  # shown as text
    assert "<b>paid</b>" not in page.text
    assert api.status_code == 200, api.text
    body = api.json()
    assert (body["where"], body["result"]["value"]) == ("completed", value)
    assert body["result"]["bytes"] == len(stored)
