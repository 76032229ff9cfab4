"""A queue tab's payload filter: the jobs whose payload contains the text (case-folded), among at
most FILTER_SCAN looked at, with what it looked at said on the page."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

from emq_worker.dashboard import payload_filter
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from tests.dashboard.test_dashboard_http import browsing


@pytest.fixture
def queue(client: Redis, queue_name: str) -> Queue:
    return Queue(client, Scripts(), queue_name)


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-job="(JOB\w+)">', html)


def notice(html: str) -> str:
    found = re.search(r'<p class="filtered" role="status">(.*?)</p>', html, re.DOTALL)
    assert found, "no filter notice on the page"
    return found.group(1)


async def customers(queue: Queue, *names: str) -> list[JobId]:
    producer = Producer(queue.client)
    return [
        (await producer.enqueue(queue.name, "invoice", {"customer": name})).job_id for name in names
    ]


async def test_the_filter_lists_the_jobs_whose_payload_contains_the_text_case_folded(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    ids = await customers(queue, "ACME Corp", "Globex", "acme ltd", "Initech", "Umbrella")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/pending", params={"filter": "Acme"})
        newest = await http.get(
            f"/queues/{queue.name}/pending", params={"filter": "acme", "order": "newest"}
        )
        none = await http.get(f"/queues/{queue.name}/pending", params={"filter": "Hooli"})
        unfiltered = await http.get(f"/queues/{queue.name}/pending")
    assert listed(page.text) == [ids[0], ids[2]]
    assert notice(page.text) == "2 of the 5 jobs looked at (of 5 pending) contain “Acme”."
    assert listed(newest.text) == [ids[2], ids[0]]
    assert "filter=acme" in newest.text  # the order links keep the filter
    assert listed(none.text) == []
    assert notice(none.text).startswith("0 of the 5 jobs looked at")
    assert listed(unfiltered.text) == ids
    assert "looks at the first 2000 jobs of this tab" in unfiltered.text


async def test_the_filter_looks_at_no_more_than_its_bound_and_says_so(
    client: Redis, redis_url: str, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload_filter, "FILTER_SCAN", 3)
    monkeypatch.setattr(payload_filter, "FILTER_PEEK_BYTES", 60)
    ids = await customers(queue, "acme 1", "acme " + "x" * 100, "acme 3", "acme 4", "acme 5")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/pending", params={"filter": "acme"})
    assert listed(page.text) == [ids[0], ids[2]]
    assert notice(page.text) == (
        "2 of the 3 jobs looked at (of 5 pending) contain “acme”; the other 2 were not looked "
        "at; 1 payload(s) too large to read were skipped."
    )


async def test_the_filter_text_is_shown_as_text_and_bounded(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await customers(queue, "<b>bold</b>")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/pending", params={"filter": "<b>"})
        long = await http.get(f"/queues/{queue.name}/pending", params={"filter": "x" * 201})
    assert "contain “&lt;b&gt;”" in notice(page.text)
    assert len(listed(page.text)) == 1
    assert long.status_code == 400
    assert "at most 200 characters" in long.text
