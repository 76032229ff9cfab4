"""Flows, fair lanes and priorities in the dashboard, over HTTP against the real test server: a
flow parent's page counts and names its children (bounded), a child's page links to its parent,
a queue with lanes has a lanes tab and its JSON twin (the deepest N), and the pending tab shows
the priority of jobs that have one. Flows and lanes are made through the Producer."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

from emq_worker import FlowJob, Producer
from emq_worker.admin.flow_inspect import CHILDREN_SHOWN
from emq_worker.protocol.lane_verbs import limit_lane, pause_lane
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion
from tests.dashboard.test_dashboard_http import browsing
from tests.support.conformance import RECEIPT_MS, held
from tests.support.flows import half_done_flow


@pytest.fixture
def queue(client: Redis, queue_name: str) -> Queue:
    return Queue(client, Scripts(), queue_name)


def child_states(html: str) -> dict[str, str]:
    rows = re.findall(r'<tr data-child="(JOB\w+)">.*?class="state">(\w+)<', html)
    return dict(rows)


async def test_a_flow_parents_page_counts_and_names_its_children(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    parent, a, b, _ = await half_done_flow(queue, "gave <b>up</b>")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{parent}")
        fragment = await http.get(f"/fragments/queues/{queue.name}/jobs/{parent}")
        api = (await http.get(f"/api/queues/{queue.name}/jobs/{parent}")).json()
    assert page.status_code == 200, page.text
    for html in (page.text, fragment.text):
        assert re.search(r'class="where">awaiting_children<', html)
        assert re.search(r'class="num outstanding">1<', html)
        assert re.search(r'class="num completed">1<', html)
        assert re.search(r'class="num ignored">1<', html)
        assert child_states(html) == {a: "completed", b: "ignored"}
        assert f'href="/search?id={a}"' in html
        assert "gave &lt;b&gt;up&lt;/b&gt;" in html
    assert api["where"] == "awaiting_children"
    assert api["flow"]["children_outstanding"] == 1
    assert api["flow"]["children_counts"] == {"completed": 1, "failed": 0, "ignored": 1}
    assert api["flow"]["children_completed"] == [a]


async def test_a_flow_childs_page_links_to_its_parent_and_names_its_policy(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    parent, _, _, c = await half_done_flow(queue)
    kids = queue.name + ".kids"
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{kids}/jobs/{c}")
        api = (await http.get(f"/api/queues/{kids}/jobs/{c}")).json()
        plain = await Producer(client).enqueue_raw(queue.name, b"x")
        alone = await http.get(f"/queues/{queue.name}/jobs/{plain.job_id}")
    assert page.status_code == 200, page.text
    assert f'href="/queues/{queue.name}/jobs/{parent}" class="parent"' in page.text
    assert f'in queue <a href="/queues/{queue.name}">' in page.text
    assert re.search(r'class="parent-where">awaiting_children<', page.text)
    assert re.search(r'class="policy">fp<', page.text)
    assert (api["flow"]["parent"], api["flow"]["parent_queue"]) == (parent, queue.name)
    assert 'class="flow"' not in alone.text


async def test_a_parent_of_many_children_names_a_bounded_number(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    many = CHILDREN_SHOWN + 30
    children = [FlowJob(payload=b"%d" % n) for n in range(many)]
    flow = await Producer(client).enqueue_flow(
        queue.name, FlowJob(payload=b"parent", children=children)
    )
    claimed = (await queue.claim(many, 30_000)).jobs
    assert len(claimed) == many
    await queue.settle([Completion(held(job)) for job in claimed[:-1]], RECEIPT_MS)
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{flow.job_id}")
        api = (await http.get(f"/api/queues/{queue.name}/jobs/{flow.job_id}")).json()
    assert page.status_code == 200, page.text
    assert api["flow"]["children_counts"]["completed"] == many - 1
    assert 0 < len(api["flow"]["children_completed"]) <= CHILDREN_SHOWN
    assert 0 < len(child_states(page.text)) <= CHILDREN_SHOWN
    assert re.search(rf'class="num completed">{many - 1}<', page.text)
    assert f"at most {CHILDREN_SHOWN} of each kind are named" in page.text


async def lanes_of_three(queue: Queue) -> None:
    """Lanes big (5 jobs, limit 2), small (2 jobs, paused) and tiny (1 job)."""
    producer = Producer(queue.client)
    for group, jobs in (("big", 5), ("small", 2), ("tiny", 1)):
        for n in range(jobs):
            await producer.enqueue(queue.name, "charge", {"n": n}, group=group)
    await limit_lane(queue, "big", 2)
    await pause_lane(queue, "small")


async def test_a_queue_with_lanes_shows_them_deepest_first(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await lanes_of_three(queue)
    async with browsing(client, redis_url) as http:
        overview = await http.get(f"/queues/{queue.name}")
        page = await http.get(f"/queues/{queue.name}/lanes")
        top2 = (await http.get(f"/api/queues/{queue.name}/lanes?top=2")).json()
        every = (await http.get(f"/api/queues/{queue.name}/lanes")).json()
    assert overview.status_code == page.status_code == 200
    assert f'href="/queues/{queue.name}/lanes"' in overview.text
    assert re.search(r'class="waiting">8<', overview.text)
    rows = re.findall(
        r'<tr data-group="(\w+)">.*?"num waiting">(\d+)<.*?"num active">(\d+)<'
        r'.*?"num limit">(\w+)<.*?"paused">(\w*)<',
        page.text,
        re.S,
    )
    assert rows == [
        ("big", "5", "0", "2", ""),
        ("small", "2", "0", "none", "paused"),
        ("tiny", "1", "0", "none", ""),
    ]
    assert re.search(r'class="ring">2<', page.text)  # big and tiny: small is paused
    assert [lane["group"] for lane in top2["deepest"]] == ["big", "small"]
    assert (top2["groups"], top2["waiting"], top2["serviceable"]) == (3, 8, 2)
    assert top2["top"] == 2
    assert len(every["deepest"]) == 3


async def test_a_queue_without_lanes_has_no_lanes_tab_and_a_bad_top_is_400(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await Producer(client).enqueue(queue.name, "charge", {})
    async with browsing(client, redis_url) as http:
        overview = await http.get(f"/queues/{queue.name}")
        page = await http.get(f"/queues/{queue.name}/lanes")
        zero = await http.get(f"/api/queues/{queue.name}/lanes?top=0")
        huge = await http.get(f"/queues/{queue.name}/lanes?top=1001")
        unknown = await http.get("/api/queues/no-such-queue/lanes")
    assert f'href="/queues/{queue.name}/lanes"' not in overview.text
    assert page.status_code == 200
    assert "No lanes" in page.text
    assert (zero.status_code, huge.status_code, unknown.status_code) == (400, 400, 404)
    assert "'0'" in zero.text


async def test_the_pending_tab_shows_priorities_when_a_job_has_one(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    producer = Producer(client)
    plain = (await producer.enqueue(queue.name, "charge", {})).job_id
    late = (await producer.enqueue(queue.name, "charge", {}, priority=5)).job_id
    first = (await producer.enqueue(queue.name, "charge", {}, priority=-3)).job_id
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/pending")
        api = (await http.get(f"/api/queues/{queue.name}/jobs?state=pending")).json()
    assert page.status_code == 200
    assert '<th class="num">priority</th>' in page.text
    shown = dict(
        re.findall(r'<tr data-job="(JOB\w+)">.*?class="num priority">(-?\d*)<', page.text, re.S)
    )
    assert shown == {first: "-3", plain: "", late: "5"}
    assert {job["id"]: job["priority"] for job in api["jobs"]} == {
        first: -3,
        plain: None,
        late: 5,
    }
    await client.delete(queue.keys.pending)
    await producer.enqueue(queue.name, "charge", {})
    async with browsing(client, redis_url) as http:
        again = await http.get(f"/queues/{queue.name}/pending")
    assert "priority</th>" not in again.text
