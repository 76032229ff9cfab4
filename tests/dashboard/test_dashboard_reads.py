"""What the read side of issue 28 adds to the pages, over HTTP against the real test server: a
job's return value, flow parents waiting for their children, jobs waiting in lanes, and the
retries apart from the plain delayed jobs."""

from __future__ import annotations

import html
import re

from redis.asyncio import Redis

from emq_worker import FlowJob
from emq_worker.jobs.producer import Producer
from emq_worker.jobs.results import encode_result
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.names import JobId
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


def job_rows(page: str) -> list[str]:
    """The job ids of a listing page's rows, in order."""
    return re.findall(r'<tr data-job="([^"]+)">', page)


async def test_flow_parents_waiting_for_children_are_listed_with_the_children_still_out(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    producer = Producer(client)
    waiting = await producer.enqueue_flow(
        queue_name, FlowJob("assemble", children=[FlowJob("part", {"n": n}) for n in range(3)])
    )
    released = await producer.enqueue_flow(queue_name, FlowJob("ship", children=[FlowJob("pack")]))
    done = {waiting.children[0].job_id, released.children[0].job_id}
    for job in (await queue.claim(4, 30_000)).jobs:  # the other two children stay active
        if job.id in done:
            await queue.complete(HeldLease(job.id, job.token, job.nonce), 1000)
    assert await queue.state_of(released.job_id) == "pending"
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue_name}/waiting")
        api = (await http.get(f"/api/queues/{queue_name}/jobs?state=waiting")).json()
    assert page.status_code == 200, page.text[-300:]
    assert job_rows(page.text) == [waiting.job_id]
    assert re.search(r'class="num outstanding">2<', page.text)
    assert 'data-tab="waiting"' in page.text
    assert (api["total"], [(j["id"], j["outstanding"]) for j in api["jobs"]]) == (
        1,
        [(waiting.job_id, 2)],
    )


async def test_jobs_waiting_in_lanes_are_listed_and_counted_in_pending(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    flat = [(await producer.enqueue(queue_name, "charge", {"n": n})).job_id for n in range(30)]
    lane = [
        (await producer.enqueue(queue_name, "charge", {"n": n}, group="tenant-a")).job_id
        for n in range(40)
    ]
    async with browsing(client, redis_url) as http:
        first = await http.get(f"/queues/{queue_name}/pending")
        second = await http.get(f"/queues/{queue_name}/pending?page=2")
        newest = (
            await http.get(f"/api/queues/{queue_name}/jobs?state=pending&order=newest")
        ).json()
    assert first.status_code == 200, first.text[-300:]
    assert re.search(r'data-tab="pending">pending <span class="count">70<', first.text)
    assert job_rows(first.text) == flat + lane[:20]
    assert job_rows(second.text) == lane[20:]
    assert re.search(r'class="group">tenant-a<', second.text)
    assert newest["total"] == 70
    assert [j["id"] for j in newest["jobs"]] == lane[::-1] + flat[::-1][:10]
    assert {j["group"] for j in newest["jobs"][:40]} == {"tenant-a"}


async def test_retries_are_listed_with_attempt_and_error_apart_from_delayed_jobs(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    producer = Producer(client)
    failing = (await producer.enqueue(queue_name, "charge", {"order": "F-1"})).job_id
    later = await producer.enqueue(queue_name, "charge", {"order": "L-1"}, delay_ms=3_600_000)
    [job] = (await queue.claim(1, 30_000)).jobs
    assert job.id == failing
    lease = HeldLease(job.id, job.token, job.nonce)
    await queue.fail(lease, 1000, delay_ms=600_000, max_attempts=5, error="<i>card declined</i>")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue_name}/retries")
        scheduled = await http.get(f"/queues/{queue_name}/scheduled")
        api = (await http.get(f"/api/queues/{queue_name}/jobs?state=retries")).json()
    assert page.status_code == 200, page.text[-300:]
    assert job_rows(page.text) == [failing]
    assert html.escape("<i>card declined</i>") in page.text
    assert re.search(r'class="runs"[^>]*>in \d', page.text)
    assert sorted(job_rows(scheduled.text)) == sorted([failing, later.job_id])
    assert [(j["id"], j["attempts"], j["error"]) for j in api["jobs"]] == [
        (failing, 1, "<i>card declined</i>")
    ]


async def test_a_parent_echomqs_producer_holds_is_listed_when_asked_for_a_scan(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    parent = JobId(SnowflakeMinter(1005).job_id())
    row = queue.keys.job(parent)  # as EchoMQ's Flows add writes it: no flow:held member
    await client.hset(row, mapping={"state": "awaiting_children", "attempts": "0", "payload": "x"})
    await client.set(f"{row}:dependencies", 2)
    await client.zadd(queue.keys.pending, {"JOB0000000000b": 0})  # the queue exists
    async with browsing(client, redis_url) as http:
        listed = await http.get(f"/queues/{queue_name}/waiting")
        scanned = await http.get(f"/queues/{queue_name}/waiting?scan=1")
    assert job_rows(listed.text) == []
    assert 'id="scan-parents"' in listed.text
    assert job_rows(scanned.text) == [parent]
    assert re.search(r'class="num outstanding">2<', scanned.text)
