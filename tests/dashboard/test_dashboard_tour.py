"""Every page of the dashboard in Debian's headless Chromium, on a scene with a past (an hour of
history written in the documented bucket format) and a present (a real worker holding leases,
settling, failing): the graphs drawn and redrawn live, the lease bars from the claim with their
holder, the tabs, the job's attempts, the workers, the tasks, the search, and the actions from a
job's own page. No request answers 4xx/5xx (the favicon included) and no script error occurs.

The tour takes a screenshot of each main page into its tmp dir; with EMQ_UPDATE_SCREENSHOT=1 it
also refreshes docs/images/dashboard-*.png, shown by docs/how-to/dashboard.md.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import anyio
import pytest
from playwright.async_api import Page, Response, expect
from redis.asyncio import Redis

from emq_worker import FlowJob, Producer
from emq_worker.dashboard.runtime import NO_VALUE
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion, HeldLease
from tests.dashboard.test_dashboard_browser import (
    CHROMIUM,
    SEEN_MS,
    chromium,
    dashboard_settings,
    page_on,
    serving,
)
from tests.support.running import running_worker, worker_settings
from tests.support.scene import backfill, shop_app
from tests.support.wait import eventually

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
    pytest.mark.fault,
]
TWICE_OR_MORE = re.compile(r"^([2-9]|\d\d+)$")


def watch_responses(page: Page) -> list[str]:
    failures: list[str] = []

    def seen(response: Response) -> None:
        if response.status >= 400:
            failures.append(f"{response.status} {response.url}")

    page.on("response", seen)
    return failures


async def shoot(page: Page, name: str, tmp_path: Path, repo_root: Path) -> None:
    shot = tmp_path / f"dashboard-{name}.png"
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("EMQ_UPDATE_SCREENSHOT"):
        target = repo_root / "docs" / "images" / shot.name
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, target)


async def test_a_tour_of_every_page_on_a_live_scene(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, repo_root: Path
) -> None:
    suffix = queue_name.split(".", 2)[-1]
    orders, emails = f"orders.{suffix}", f"emails.{suffix}"
    rng = random.Random(21)
    await backfill(client, orders, 60, rng, ("charge", "refund", "send_receipt"))
    await backfill(client, emails, 60, rng, ("send_receipt",))
    producer = Producer(client)
    for n in range(40):
        await producer.enqueue(emails, "send_receipt", {"order": f"A-{n}"})
    await producer.enqueue(orders, "refund", {"order": "R-1"})
    # C-1 and C-2 run until released; C-7 is declined until it dies (a third slot is free).
    charges = [
        (await producer.enqueue(orders, "charge", {"order": f"C-{n}", "amount": 100 * n})).job_id
        for n in (1, 2, 7)
    ]
    for n in range(4):
        await producer.enqueue(orders, "send_receipt", {"order": f"S-{n}"}, delay_ms=3_600_000)
    release = anyio.Event()
    settings = worker_settings(orders, redis_url, concurrency=3, history_every_ms=300)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
        running_worker(settings, shop_app(release)) as worker,
    ):
        failures = watch_responses(page)
        try:
            queue = Queue(client, Scripts(), orders)
            await eventually(lambda: _dead(queue, 2), what="the refund and C-7 to die")
            await overview(page, base, orders, tmp_path, repo_root)
            await queue_page(page, base, orders, worker.presence, tmp_path, repo_root)
            await tabs(page, base, orders)
            await job_page(page, base, orders, charges[0], tmp_path, repo_root)
            await workers_and_tasks(page, base, orders, tmp_path, repo_root)
            await page.goto(base)
            await page.get_by_label("Find a job by its id").fill(charges[1])
            await page.get_by_role("button", name="Find").click()
            await expect(page.locator("h1")).to_have_text(f"Job {charges[1]}")
        finally:
            release.set()
    assert failures == []


async def _dead(queue: Queue, n: int) -> bool:
    return (await queue.counts()).dead >= n


async def overview(page: Page, base: str, orders: str, tmp_path: Path, repo_root: Path) -> None:
    await page.goto(base)
    chart = page.locator("#throughput")
    await expect(chart.locator("path.line.completed:not(.partial)")).to_be_attached(timeout=SEEN_MS)
    await expect(chart).to_have_attribute("data-points", "60")
    row = page.locator(f'tr[data-queue="{orders}"]')
    await expect(row.locator("td.workers")).to_have_text("1", timeout=SEEN_MS)
    await expect(row.locator("svg.spark polyline.completed")).to_be_attached(timeout=SEEN_MS)
    # Live: the graph is fetched and drawn again, and the table refreshed keeps its sparkline.
    await expect(chart).to_have_attribute("data-drawn", TWICE_OR_MORE, timeout=SEEN_MS)
    await expect(page.locator("#queues")).to_have_attribute(
        "data-refreshed", TWICE_OR_MORE, timeout=SEEN_MS
    )
    await expect(row.locator("svg.spark polyline.failed")).to_be_attached(timeout=SEEN_MS)
    await shoot(page, "overview", tmp_path, repo_root)


async def queue_page(
    page: Page, base: str, orders: str, presence: object, tmp_path: Path, repo_root: Path
) -> None:
    await page.goto(f"{base}/queues/{orders}")
    for chart in ("#throughput", "#durations"):
        await expect(page.locator(f"{chart} path.line").first).to_be_attached(timeout=SEEN_MS)
    held = page.locator("tr.lease:not(.ended)")
    await expect(held).to_have_count(2, timeout=SEEN_MS)
    worker_id = getattr(presence, "id", "")
    for n in range(2):
        lane = held.nth(n)
        await expect(lane.locator("td.holder")).to_have_text(worker_id, timeout=SEEN_MS)
        await expect(lane.locator("td.task")).to_have_text("charge")
        await expect(lane.locator("rect.renewal").nth(2)).to_be_attached(timeout=SEEN_MS)
    assert await page.evaluate(NOW_ON_TOP) is True
    await shoot(page, "queue", tmp_path, repo_root)


NOW_ON_TOP = """() => [...document.querySelectorAll("tr.lease:not(.ended) svg")].every((svg) => {
  const now = svg.querySelector("rect.now").getBoundingClientRect();
  const hit = document.elementFromPoint(now.x + now.width / 2, now.y + now.height * 0.1);
  return hit !== null && hit.classList.contains("now");
})"""
"""At the top of the lane, where the renewal ticks stand, the now line is what shows."""


async def tabs(page: Page, base: str, orders: str) -> None:
    expected = {"pending": 0, "scheduled": 4, "active": 2, "dead": 2}
    for state, rows in expected.items():
        await page.goto(f"{base}/queues/{orders}/{state}")
        await expect(page.locator(f'nav.tabs a[data-tab="{state}"]')).to_have_class("on")
        await expect(page.locator("tbody tr[data-job]")).to_have_count(rows)
    await expect(page.locator("td.last-error").first).to_contain_text("refund window closed")
    await page.goto(f"{base}/queues/{orders}/active")
    await expect(page.locator("td.lane svg rect.bar")).to_have_count(2)
    await page.goto(f"{base}/queues/{orders}/completed")
    await expect(page.locator("h1")).to_contain_text("Completed jobs")


async def job_page(
    page: Page, base: str, orders: str, job_id: str, tmp_path: Path, repo_root: Path
) -> None:
    await page.goto(f"{base}/queues/{orders}/jobs/{job_id}")
    await expect(page.locator("td.where")).to_have_text("active")
    await expect(page.locator("td.task")).to_have_text("charge")
    await expect(page.locator("td.holder")).not_to_have_text("?", timeout=SEEN_MS)
    await expect(page.locator('tr[data-attempt="1"] td.outcome')).to_have_text("running")
    await expect(page.locator("progress")).to_have_attribute("value", "40.0")
    await expect(page.locator("pre.logs")).to_contain_text("charging 100 for C-1")
    await shoot(page, "job", tmp_path, repo_root)


async def workers_and_tasks(
    page: Page, base: str, orders: str, tmp_path: Path, repo_root: Path
) -> None:
    await page.goto(f"{base}/workers")
    row = page.locator("tr[data-worker]")
    await expect(row).to_have_count(1)
    await expect(row.locator("span.slots")).to_have_text("2 / 3")
    await expect(row.locator("td.held a")).to_have_count(2)
    await shoot(page, "workers", tmp_path, repo_root)
    await page.goto(f"{base}/tasks")
    charge = page.locator(f'tr[data-task="charge"][data-queue="{orders}"]')
    await expect(charge.locator("td.p95")).not_to_have_text(NO_VALUE)
    refund = page.locator(f'tr[data-task="refund"][data-queue="{orders}"]')
    await expect(refund.locator("td.errors")).to_contain_text("refund window closed")
    await shoot(page, "tasks", tmp_path, repo_root)


async def test_a_dead_job_is_retried_then_another_purged_from_its_own_page(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    producer = Producer(client)
    ids = [(await producer.enqueue(queue_name, "charge", {"n": n})).job_id for n in (1, 2)]
    for _ in ids:
        [job] = (await queue.claim(1, 30_000)).jobs
        held = HeldLease(job.id, job.token, job.nonce)
        await queue.fail(held, 1000, delay_ms=0, max_attempts=0, error="no")
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
        failures = watch_responses(page)
        await page.goto(f"{base}/queues/{queue_name}/jobs/{ids[0]}")
        await page.get_by_role("button", name="Retry this job").click()
        await expect(page.locator("p.flash")).to_contain_text("retried 1 dead job(s)")
        await expect(page.locator("td.where")).to_have_text("pending")
        await page.goto(f"{base}/queues/{queue_name}/jobs/{ids[1]}")
        await page.get_by_role("button", name="Purge this job").click()
        await page.get_by_role("button", name="Yes, purge").click()
        await expect(page.get_by_text("No dead jobs.")).to_be_visible()
    assert await queue.state_of(ids[0]) == "pending"
    assert await queue.state_of(ids[1]) == "absent"
    assert failures == []


async def test_a_tour_of_a_flow_and_of_a_queue_with_lanes_and_priorities(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """A flow parent's page (its children counted and named, refreshed live), a child's link
    to its parent, a queue's lanes tab and its pending tab with priorities: no request answers
    4xx/5xx, no script error, nothing on the console."""
    queue = Queue(client, Scripts(), queue_name)
    producer = Producer(client)
    root = FlowJob("assemble", children=[FlowJob("part", {"n": n}) for n in range(3)])
    flow = await producer.enqueue_flow(queue_name, root)
    [first] = (await queue.claim(1, 30_000)).jobs
    await queue.settle([Completion(HeldLease(first.id, first.token, first.nonce))], 60_000)
    for group, jobs in (("tenant-big", 4), ("tenant-small", 1)):
        for n in range(jobs):
            await producer.enqueue(queue_name, "charge", {"n": n}, group=group)
    await producer.enqueue(queue_name, "charge", {"urgent": True}, priority=-5)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
        failures = watch_responses(page)
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        await page.goto(f"{base}/queues/{queue_name}/jobs/{flow.job_id}")
        await expect(page.locator("td.where")).to_have_text("awaiting_children")
        await expect(page.locator("td.outstanding")).to_have_text("2")
        await expect(page.locator(f'tr[data-child="{first.id}"] td.state')).to_have_text(
            "completed"
        )
        await expect(page.locator("#job")).to_have_attribute(
            "data-refreshed", TWICE_OR_MORE, timeout=SEEN_MS
        )
        await expect(page.locator("td.outstanding")).to_have_text("2")
        out = next(child.job_id for child in flow.children if child.job_id != first.id)
        await page.goto(f"{base}/queues/{queue_name}/jobs/{out}")
        await page.locator("a.parent").click()
        await expect(page.locator("h1")).to_have_text(f"Job {flow.job_id}")
        await page.goto(f"{base}/queues/{queue_name}")
        await page.locator('nav.tabs a[data-tab="lanes"]').click()
        await expect(page.locator("tr[data-group]")).to_have_count(2)
        await expect(page.locator('tr[data-group="tenant-big"] td.waiting')).to_have_text("4")
        await page.locator('nav.tabs a[data-tab="pending"]').click()
        await expect(page.locator("td.priority").first).to_have_text("-5")
    assert failures == []
    assert console == []
