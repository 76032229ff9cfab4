"""The dashboard's pages beyond the timeline, over HTTP: the overview, a queue's job lists per
state (paginated), a job's holder and attempts, the workers, the tasks, the history graphs'
JSON and the search; every page read-only by default."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from redis.asyncio import Redis

from emq_worker import Producer
from emq_worker.observe.history_format import bucket_upper_ms, duration_bucket, percentile
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.history_flush import HistoryRecorder
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.presence import Presence, WorkerRegistry
from tests.dashboard.test_dashboard_http import browsing, claim, enqueue, kill, lease_of

PAGES = ("/", "/workers", "/tasks", "/search")


@pytest.fixture
def queue(client: Redis, queue_name: str) -> Queue:
    return Queue(client, Scripts(), queue_name)


async def announce(client: Redis, queue: str, held: list[tuple[ClaimedJob, float]]) -> str:
    """A worker's presence entry holding `held` (each claimed that many seconds ago)."""
    registry = WorkerRegistry(client, [queue], concurrency=4, beat_ms=1000, lease_ms=30_000)
    leases = [Lease(job=job, confirmed_at=100.0 - ago) for job, ago in held]
    await registry.beat(Presence(len(leases), 7, len(leases), {queue: leases}, 100.0))
    return registry.id


async def server_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def rows_of(html: str) -> list[str]:
    """The data-job of each row of the page's job table."""
    return re.findall(r'<tr data-job="(JOB\w+)"', html)


# --- the overview -------------------------------------------------------------------------


async def test_the_overview_totals_the_queues_and_counts_their_workers(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await enqueue(queue)
    job = await claim_one(queue)
    await kill(queue)
    await announce(client, queue.name, [(job, 2.0)])
    async with browsing(client, redis_url) as http:
        # The test server holds other tests' queues too: find the page (by name) that lists ours.
        number, api = 1, (await http.get("/api/queues")).json()
        while queue.name not in api["workers"] and number * api["per_page"] < api["total"]:
            number += 1
            api = (await http.get(f"/api/queues?page={number}")).json()
        page = await http.get(f"/?page={number}")
        sparks = (await http.get(f"/api/sparks?page={number}")).json()
    assert api["workers"][queue.name] == 1
    row = re.search(rf'<tr data-queue="{re.escape(queue.name)}">(.*?)</tr>', page.text, re.S)
    assert row
    assert re.search(r'class="num workers">1<', row.group(1))
    assert f'data-spark="{queue.name}"' in row.group(1)
    assert 'data-chart="/api/history?range=1h"' in page.text
    assert 'data-sparks="/api/sparks' in page.text
    assert '<script src="/static/charts.js" defer></script>' in page.text
    assert len(sparks["queues"][queue.name]) == 60


async def claim_one(queue: Queue) -> ClaimedJob:
    await enqueue(queue)
    return await claim(queue)


# --- a queue's jobs by state --------------------------------------------------------------


async def test_pending_jobs_are_paged_in_mint_order_either_way(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    ids = [await enqueue(queue, n=n) for n in range(120)]
    async with browsing(client, redis_url) as http:
        first = await http.get(f"/queues/{queue.name}/pending")
        third = await http.get(f"/queues/{queue.name}/pending?page=3")
        newest = await http.get(f"/queues/{queue.name}/pending?order=newest")
        api = (await http.get(f"/api/queues/{queue.name}/jobs?state=pending&page=2")).json()
        bad = [
            await http.get(f"/queues/{queue.name}/pending?page=0"),
            await http.get(f"/queues/{queue.name}/pending?order=sideways"),
            await http.get(f"/api/queues/{queue.name}/jobs?state=lost"),
        ]
    assert rows_of(first.text) == ids[:50]
    assert rows_of(third.text) == ids[100:]
    assert rows_of(newest.text) == ids[::-1][:50]
    assert "page 1 of 3 (120)" in first.text
    assert 'href="?page=2&amp;order=oldest"' in first.text
    assert [job["id"] for job in api["jobs"]] == ids[50:100]
    assert (api["page"], api["per_page"], api["total"]) == (2, 50, 120)
    assert api["jobs"][0]["task"] == "charge"
    assert api["jobs"][0]["args"] == '{"n": 50}'
    assert [r.status_code for r in bad] == [400, 400, 400]
    assert "page must be a whole number" in bad[0].text


async def test_scheduled_active_dead_and_completed_tabs(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    scheduled = (
        await Producer(client).enqueue(queue.name, "remind", {}, delay_ms=3_600_000)
    ).job_id
    held = await claim_one(queue)
    announced_at = await server_ms(client)
    worker = await announce(client, queue.name, [(held, 5.0)])
    dead = await kill(queue, error="card <declined>")
    done = await claim_one(queue)
    await queue.complete(lease_of(done), 1000)
    counters = Counters()
    counters.settled(queue.name, "charge", "completed", 0.25, (done.id, 1))
    await HistoryRecorder(counters, "w-test", 1000).flush([queue], 0.0)
    async with browsing(client, redis_url) as http:
        pages = {
            state: (await http.get(f"/queues/{queue.name}/{state}")).text
            for state in ("scheduled", "active", "dead", "completed")
        }
    rendered_by = await server_ms(client)
    assert rows_of(pages["scheduled"]) == [scheduled]
    assert "in 3" in pages["scheduled"]  # runs in about an hour ("in 3599.9 s")
    assert rows_of(pages["active"]) == [held.id]
    assert f'<td class="holder">{worker}</td>' in pages["active"]
    # Claimed 5 s before the entry was written, per the entry; the page is rendered later by
    # whatever this run took (measured on the server clock), whole seconds on a busy machine.
    [running] = re.findall(r'<td class="running">([\d.]+)', pages["active"])
    assert 5.0 <= float(running) <= 5.0 + (rendered_by - announced_at) / 1000 + 0.1, running
    assert 'class="now"' in pages["active"]
    assert rows_of(pages["dead"]) == [dead]
    assert "card &lt;declined&gt;" in pages["dead"]
    assert rows_of(pages["completed"]) == [done.id]
    assert '<td class="worker">w-test</td>' in pages["completed"]
    assert "250 ms" in pages["completed"]


# --- a job --------------------------------------------------------------------------------


async def test_a_running_jobs_page_names_its_holder_and_its_attempts(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job_id = await enqueue(queue)
    first = await claim(queue)
    await queue.fail(lease_of(first), 1000, delay_ms=0, max_attempts=5, error="timeout <1>")
    counters = Counters()
    counters.settled(queue.name, "charge", "retried", 0.5, (job_id, 1), "timeout <1>")
    await HistoryRecorder(counters, "w-old", 1000).flush([queue], 0.0)
    second = await claim(queue)
    worker = await announce(client, queue.name, [(second, 3.0)])
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{job_id}")
        api = (await http.get(f"/api/queues/{queue.name}/jobs/{job_id}")).json()
    assert f'<td class="holder">{worker}</td>' in page.text
    assert "running for 3." in page.text
    attempts = re.findall(
        r'<tr data-attempt="(\d+)" class="(\w+)">.*?<td class="worker">(.*?)</td>', page.text
    )
    assert attempts == [("1", "retried", "w-old"), ("2", "running", worker)]
    assert "timeout &lt;1&gt;" in page.text
    assert (api["holder"], api["task"]) == (worker, "charge")
    assert api["claimed_ms"] <= api["server_now_ms"] - 3000


async def test_a_completed_jobs_page_says_how_it_ended_while_the_log_lists_it(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    done = await claim_one(queue)
    await queue.complete(lease_of(done), 1000)
    counters = Counters()
    counters.settled(queue.name, "charge", "completed", 1.5, (done.id, 1))
    await HistoryRecorder(counters, "w-1", 1000).flush([queue], 0.0)
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{done.id}")
        api = await http.get(f"/api/queues/{queue.name}/jobs/{done.id}")
    assert page.status_code == 404  # the row is gone
    assert f"no job {done.id} in queue" in page.text
    assert '<tr data-attempt="1" class="completed">' in page.text
    assert "1.5 s" in page.text
    assert api.status_code == 404


# --- workers, tasks, history, search ------------------------------------------------------


async def test_the_workers_page_shows_identity_slots_and_held_jobs(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    held = await claim_one(queue)
    worker = await announce(client, queue.name, [(held, 1.0)])
    async with browsing(client, redis_url) as http:
        page = await http.get("/workers")
        fragment = await http.get("/fragments/workers")
        api = (await http.get(f"/api/workers?queue={queue.name}")).json()
    for html in (page.text, fragment.text):
        row = re.search(rf'<tr data-worker="{re.escape(worker)}">(.*?)</tr>', html, re.S)
        assert row, html
        assert '<meter min="0" max="4" value="1">' in row.group(1)
        assert f'href="/queues/{queue.name}/jobs/{held.id}"' in row.group(1)
    assert 'data-poll="/fragments/workers"' in page.text
    [mine] = api["workers"]
    assert (mine["id"], mine["busy"], mine["concurrency"]) == (worker, 1, 4)
    assert mine["held_by_queue"] == {queue.name: 1}
    assert mine["jobs"][0]["id"] == held.id
    assert mine["version"]


async def test_the_tasks_page_has_counts_failure_rate_percentiles_and_errors(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    counters = Counters()
    runs_s = [0.1 * (n + 1) for n in range(18)]
    for n, seconds in enumerate(runs_s):
        counters.settled(queue.name, "charge", "completed", seconds, (f"JOB{n:011d}", 1))
    counters.settled(
        queue.name, "charge", "dead_lettered", 0.2, ("JOB00000000099", 3), "card <b>x</b>"
    )
    # What the page must show: the percentiles of the histogram of these 19 runs, as the
    # history keeps it (ten buckets a decade), not of some other sample.
    histogram = Counter(duration_bucket(seconds) for seconds in [*runs_s, 0.2])
    counters.settled(queue.name, "refund", "retried", 0.05, ("JOB00000000098", 1), "later")
    await HistoryRecorder(counters, "w", 1000).flush([queue], 0.0)
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/tasks?queue={queue.name}")
        api = (await http.get(f"/api/tasks?queue={queue.name}&range=7d")).json()
        bad = await http.get("/tasks?range=1y")
    tasks = {t["task"]: t for t in api["tasks"]}
    charge = tasks["charge"]
    assert (charge["completed"], charge["dead"], charge["failure_rate"]) == (18, 1, 0.0526)
    assert charge["p50_ms"] == percentile(histogram, 0.5)
    assert charge["p95_ms"] == percentile(histogram, 0.95)
    # ...which lie within a bucket (26 %) of the true median (0.9 s) and 95th percentile (1.8 s).
    assert bucket_upper_ms(duration_bucket(0.9) - 1) <= charge["p50_ms"]
    assert charge["p50_ms"] <= bucket_upper_ms(duration_bucket(0.9))
    assert bucket_upper_ms(duration_bucket(1.8) - 1) <= charge["p95_ms"]
    assert charge["p95_ms"] <= bucket_upper_ms(duration_bucket(1.8))
    assert charge["errors"][0]["error"] == "card <b>x</b>"
    assert tasks["refund"]["retried"] == 1
    assert '<tr data-task="charge"' in page.text
    assert "card &lt;b&gt;x&lt;/b&gt;" in page.text
    assert bad.status_code == 400


@pytest.mark.parametrize("span", ["1h", "6h", "24h", "7d", "14d"])
async def test_the_history_json_has_one_point_per_step(
    client: Redis, redis_url: str, queue: Queue, span: str
) -> None:
    counters = Counters()
    counters.settled(queue.name, "charge", "completed", 0.01, ("JOB00000000001", 1))
    counters.by_queue[(queue.name, "claimed")] += 1
    await HistoryRecorder(counters, "w", 1000).flush([queue], 0.0)
    async with browsing(client, redis_url) as http:
        found = (await http.get(f"/api/history?range={span}&queue={queue.name}")).json()
    expected = {"1h": 60, "6h": 72, "24h": 96, "7d": 84, "14d": 84}[span]
    assert len(found["points"]) == expected
    assert found["points"][-1]["completed"] == 1  # now is in the last point
    assert found["total"]["claims"] == 1
    assert found["points"][1]["t"] - found["points"][0]["t"] == found["step_ms"]


async def test_search_goes_to_the_job_or_says_where_it_looked(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job_id = await enqueue(queue)
    async with browsing(client, redis_url) as http:
        found = await http.get(f"/search?id={job_id}")
        missing = await http.get("/search?id=JOB0000000000z")
        bad = await http.get("/search?id=not-an-id")
        empty = await http.get("/search")
    assert (found.status_code, found.headers["location"]) == (
        303,
        f"/queues/{queue.name}/jobs/{job_id}",
    )
    assert 'id="not-found"' in missing.text
    assert bad.status_code == 400
    assert empty.status_code == 200


# --- the timeline's now line and claim ----------------------------------------------------


async def test_the_lease_bar_starts_at_the_claim_and_ticks_never_hide_the_now_line(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job = await claim_one(queue)
    announced_from = await server_ms(client)
    worker = await announce(client, queue.name, [(job, 12.0)])  # claimed 12 s before it wrote this
    async with browsing(client, redis_url) as http:
        await http.get(f"/api/queues/{queue.name}/leases")
        await queue.renew([lease_of(job)], 30_000)  # a renewal the next sample sees: at "now"
        await announce(client, queue.name, [(job, 12.0)])
        asked_at = await server_ms(client)
        timeline = (await http.get(f"/api/queues/{queue.name}/leases")).json()
        sampled_by = await server_ms(client)
        page = await http.get(f"/fragments/queues/{queue.name}")
    [lease] = timeline["leases"]
    assert lease["holder"] == worker
    assert lease["claim_estimated"] is False
    # 12 s before its holder's entry was written, on the server clock (PTTL's ms rounding aside).
    # The sample reads the clock and the entry's age in two round trips: the estimate may come
    # early by the gap between them, at most the request's own time (a busy machine's slack).
    slack = sampled_by - asked_at
    claimed = lease["claimed_ms"]
    story = f"claimed_ms {claimed}; announced from {announced_from}, sampled by {sampled_by}"
    assert announced_from - 12_001 - slack <= claimed <= sampled_by - 12_000, story
    assert lease["renewals"][-1] == timeline["now_ms"]  # the newest tick sits on the now line
    svg = re.search(r"<svg viewBox=\"0 0 100 12\".*?</svg>", page.text, re.S)
    assert svg
    rects = re.findall(
        r'<rect class="([\w ]+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"',
        svg.group(0),
    )
    assert rects[-1][0] == "now"  # drawn last, over everything
    now_height = float(rects[-1][4])
    for kind, _, y, _, height in rects:
        if kind == "renewal":
            assert float(y) + float(height) <= 4 < now_height  # ticks stay in the top band
    bar = next(r for r in rects if r[0].startswith("bar"))
    assert float(bar[1]) < float(rects[-1][1]) - 10  # the bar starts well before now


async def test_a_lease_no_worker_lists_is_dated_its_deadline_minus_the_lease_never_later(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    lapsed = await claim_one(queue)  # claimed by no worker of ours (as EchoMQ's would be)
    await queue.client.zadd(queue.keys.active, {lapsed.id: 1})  # its deadline long past
    async with browsing(client, redis_url) as http:
        first = (await http.get(f"/api/queues/{queue.name}/leases")).json()
        unlisted = await claim_one(queue)
        deadline = int(await client.zscore(queue.keys.active, unlisted.id) or 0)
        other = await claim_one(queue)
        await announce(client, queue.name, [(other, 1.0)])  # a worker with 30 s leases
        second = (await http.get(f"/api/queues/{queue.name}/leases")).json()
        page = await http.get(f"/fragments/queues/{queue.name}")
    [seen_lapsed] = first["leases"]
    assert seen_lapsed["claim_estimated"] is True
    assert seen_lapsed["claimed_ms"] <= 1  # first seen past its deadline: not dated after it
    leases = {lease["job_id"]: lease for lease in second["leases"]}
    assert leases[unlisted.id]["claim_estimated"] is True
    assert leases[unlisted.id]["claimed_ms"] == deadline - 30_000  # its claim, exactly
    assert leases[other.id]["claim_estimated"] is False
    row = re.search(rf'data-job="{unlisted.id}".*?</tr>', page.text, re.S)
    assert row
    assert '<td class="holder">?</td>' in row.group(0)
    assert re.search(r'<td class="running" [^>]*>~', row.group(0))


# --- read-only ----------------------------------------------------------------------------


async def test_no_page_offers_an_action_when_read_only(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    dead = await kill(queue)
    held = await claim_one(queue)
    await announce(client, queue.name, [(held, 1.0)])
    paths = [
        *PAGES,
        f"/queues/{queue.name}",
        *(f"/queues/{queue.name}/{s}" for s in ("pending", "scheduled", "active", "dead")),
        f"/queues/{queue.name}/completed",
        f"/queues/{queue.name}/jobs/{dead}",
        f"/queues/{queue.name}/jobs/{held.id}",
    ]
    async with browsing(client, redis_url) as http:
        for path in paths:
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text[-500:])
            assert 'method="post"' not in page.text, path
            assert "script-src 'self'" in page.headers["content-security-policy"]
