"""The dashboard's actions and tab tools in a real browser (Debian's headless Chromium): Quiet and
Stop a real `emq-worker run` process from the workers page; promote and delete a job; tick jobs on
a tab; filter a tab by payload. With EMQ_UPDATE_SCREENSHOT=1 the tests refresh their screenshots
in docs/images (docs/how-to/dashboard.md)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import Page, expect
from redis.asyncio import Redis

from emq_worker import Producer
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.presence import live_workers
from tests.dashboard import test_dashboard_browser as browser
from tests.dashboard.test_dashboard_browser import (
    SEEN_MS,
    chromium,
    dashboard_settings,
    page_on,
    serving,
)
from tests.support.processes import WorkerProcesses
from tests.support.wait import eventually
from tests.test_worker_control import start

pytestmark = browser.pytestmark  # Chromium present, fault tier: as the other browser tests


@asynccontextmanager
async def dashboard_page(redis_url: str) -> AsyncIterator[tuple[str, Page]]:
    """The dashboard (actions on) and a Chromium page: its base URL and the page."""
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
        yield base, page


async def keep_shot(page: Page, tmp_path: Path, repo_root: Path, name: str) -> Path:
    """A screenshot in the test's tmp dir; with EMQ_UPDATE_SCREENSHOT=1 also docs/images/`name`."""
    shot = tmp_path / name
    await page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("EMQ_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, repo_root / "docs" / "images" / name)
    return shot


def shown(prefix: str, queue_name: str) -> str:
    """A queue name unique to the test that reads well in a screenshot."""
    return f"{prefix}." + queue_name.split(".", 2)[-1]


async def scheduled_jobs(queue: Queue, count: int) -> list[JobId]:
    """`count` jobs due in an hour, `n` 0, 1, ... in their arguments."""
    producer = Producer(queue.client)
    return [
        (await producer.enqueue(queue.name, "render", {"n": n}, delay_ms=3_600_000)).job_id
        for n in range(count)
    ]


async def test_quiet_then_stop_a_worker_process_from_the_workers_page(
    client: Redis,
    redis_url: str,
    queue_name: str,
    worker_processes: WorkerProcesses,
    tmp_path: Path,
    repo_root: Path,
) -> None:
    queue_name = shown("mail", queue_name)  # unique, and reads well in the shot
    producer = Producer(client)
    queue = Queue(client, Scripts(), queue_name)
    workers = worker_processes
    process = start(workers, "w", queue_name, redis_url)  # grace far longer than the test waits
    held = (await producer.enqueue(queue_name, "sleep", {"ms": 100, "first_ms": 600_000})).job_id
    await workers.ledger.wait_for("start", held, pid=process.pid, within_s=SEEN_MS / 1000)
    [entry] = await eventually(lambda: live_workers(client, queue_name), what="its entry")
    row_selector = f'tr[data-worker="{entry["id"]}"]'
    async with dashboard_page(redis_url) as (base, page):
        await page.goto(f"{base}/workers")
        row = page.locator(row_selector)
        await row.get_by_role("button", name="Quiet").click()
        await expect(page.locator("p.flash")).to_contain_text("to quiet")
        await expect(row.locator("span.control")).to_have_text("quiet", timeout=SEEN_MS)
        await expect(row.get_by_role("button", name="Quiet")).to_have_count(0)
        later = (await producer.enqueue(queue_name, "noop", {})).job_id
        await page.goto(f"{base}/queues/{queue_name}/pending")  # a free slot, a wake: not taken
        await expect(page.locator(f'tr[data-job="{later}"]')).to_be_attached()
        await page.goto(f"{base}/workers")
        await expect(row.locator("span.control")).to_have_text("quiet", timeout=SEEN_MS)
        shot = await keep_shot(page, tmp_path, repo_root, "dashboard-workers-quiet.png")

        await row.get_by_role("button", name="Stop").click()
        await expect(page.locator("p.flash")).to_contain_text("to stop")
        assert await process.wait_exit(SEEN_MS / 1000) == 0
        await expect(page.locator(row_selector)).to_have_count(0, timeout=SEEN_MS)
    assert await queue.state_of(JobId(held)) == "pending"  # handed back: it runs elsewhere
    assert await queue.state_of(later) == "pending"  # never claimed by the quiet worker
    assert workers.ledger.find(job_id=later) == []
    assert shot.stat().st_size > 10_000


async def test_promote_a_scheduled_job_and_delete_another_each_after_a_confirm(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, repo_root: Path
) -> None:
    queue = Queue(client, Scripts(), shown("invoices", queue_name))
    [later] = await scheduled_jobs(queue, 1)
    doomed = (await Producer(client).enqueue(queue.name, "send", {"n": 2})).job_id
    queue_name = queue.name
    async with dashboard_page(redis_url) as (base, page):
        await page.goto(f"{base}/queues/{queue_name}/jobs/{later}")
        await expect(page.locator("td.where")).to_have_text("scheduled")
        shot = await keep_shot(page, tmp_path, repo_root, "dashboard-job-scheduled.png")
        await page.get_by_role("button", name="Promote now…").click()
        await expect(page.locator("h1")).to_have_text(f"Promote {later} now?")
        assert await queue.state_of(later) == "scheduled"  # nothing happens before the yes
        await page.get_by_role("button", name="Yes, run it now").click()
        await expect(page.locator("p.flash")).to_contain_text(f"promoted {later}")
        await expect(page.locator("td.where")).to_have_text("pending")
        assert await queue.state_of(later) == "pending"

        await page.goto(f"{base}/queues/{queue_name}/jobs/{doomed}")
        await page.get_by_role("button", name="Delete this job…").click()
        await expect(page.locator("h1")).to_have_text(f"Delete {doomed} (pending) for good?")
        assert await queue.state_of(doomed) == "pending"
        await page.get_by_role("button", name="Yes, delete").click()
        await expect(page.locator("p.flash")).to_contain_text(f"deleted {doomed}")
    assert await queue.state_of(doomed) == "absent"
    assert shot.stat().st_size > 10_000


async def test_ticked_scheduled_jobs_are_promoted_and_tick_all_deletes_a_pending_page(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, repo_root: Path
) -> None:
    queue = Queue(client, Scripts(), shown("reports", queue_name))
    later = await scheduled_jobs(queue, 3)
    queue_name = queue.name
    async with dashboard_page(redis_url) as (base, page):
        await page.goto(f"{base}/queues/{queue_name}/scheduled")
        for job_id in later[:2]:
            await page.get_by_role("checkbox", name=f"tick {job_id}").check()
        shot = await keep_shot(page, tmp_path, repo_root, "dashboard-ticked.png")
        await page.get_by_role("button", name="Promote ticked…").click()
        await expect(page.locator("h1")).to_have_text(f"Promote 2 job(s) of {queue_name}?")
        await page.get_by_role("button", name="Yes, run them now").click()
        await expect(page.locator("p.flash")).to_contain_text("promoted 2 job(s)")
        await expect(page.locator("tr[data-job]")).to_have_count(1)

        await page.goto(f"{base}/queues/{queue_name}/pending")
        await page.get_by_role("checkbox", name="tick every job on this page").check()
        await page.get_by_role("button", name="Delete ticked…").click()
        await expect(page.locator("ul.chosen li")).to_have_count(2)
        await page.get_by_role("button", name="Yes, delete").click()
        await expect(page.locator("p.flash")).to_contain_text("deleted 2 job(s)")
        await expect(page.get_by_text("No pending jobs")).to_be_visible()
    assert [await queue.state_of(j) for j in later] == ["absent", "absent", "scheduled"]
    assert shot.stat().st_size > 10_000


async def test_the_payload_filter_narrows_a_tab_and_says_what_it_looked_at(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, repo_root: Path
) -> None:
    queue = Queue(client, Scripts(), shown("billing", queue_name))
    producer = Producer(client)
    names = ["ACME Corp", "Globex", "acme ltd", "Initech"]
    ids = [(await producer.enqueue(queue.name, "invoice", {"customer": n})).job_id for n in names]
    async with dashboard_page(redis_url) as (base, page):
        await page.goto(f"{base}/queues/{queue.name}/pending")
        await expect(page.locator("tr[data-job]")).to_have_count(4)
        await page.get_by_role("searchbox", name="payload contains").fill("acme")
        await page.get_by_role("button", name="Filter").click()
        await expect(page.locator("p.filtered")).to_have_text(
            "2 of the 4 jobs looked at (of 4 pending) contain “acme”."
        )
        await expect(page.locator("tr[data-job]")).to_have_count(2)
        for job_id in (ids[0], ids[2]):
            await expect(page.locator(f'tr[data-job="{job_id}"]')).to_be_attached()
        shot = await keep_shot(page, tmp_path, repo_root, "dashboard-filter.png")
        await page.get_by_role("link", name="clear").click()
        await expect(page.locator("tr[data-job]")).to_have_count(4)
    assert shot.stat().st_size > 10_000
