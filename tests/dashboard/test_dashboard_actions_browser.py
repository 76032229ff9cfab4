"""The write side of the dashboard in a real browser (Debian's headless Chromium): Quiet and
Stop a real `emq-worker run` process from the workers page. With EMQ_UPDATE_SCREENSHOT=1 the
test refreshes its screenshot in docs/images (docs/how-to/dashboard.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.async_api import expect
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


async def test_quiet_then_stop_a_worker_process_from_the_workers_page(
    client: Redis,
    redis_url: str,
    queue_name: str,
    worker_processes: WorkerProcesses,
    tmp_path: Path,
    repo_root: Path,
) -> None:
    queue_name = "mail." + queue_name.split(".", 2)[-1]  # unique, and reads well in the shot
    producer = Producer(client)
    queue = Queue(client, Scripts(), queue_name)
    workers = worker_processes
    process = start(workers, "w", queue_name, redis_url)  # grace far longer than the test waits
    held = (await producer.enqueue(queue_name, "sleep", {"ms": 100, "first_ms": 600_000})).job_id
    await workers.ledger.wait_for("start", held, pid=process.pid, within_s=SEEN_MS / 1000)
    [entry] = await eventually(lambda: live_workers(client, queue_name), what="its entry")
    row_selector = f'tr[data-worker="{entry["id"]}"]'
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
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
        shot = tmp_path / "workers.png"
        await page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("EMQ_UPDATE_SCREENSHOT"):
            shutil.copyfile(shot, repo_root / "docs" / "images" / "dashboard-workers-quiet.png")

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
    queue_name = "invoices." + queue_name.split(".", 2)[-1]
    queue = Queue(client, Scripts(), queue_name)
    producer = Producer(client)
    later = (await producer.enqueue(queue_name, "send", {"n": 1}, delay_ms=3_600_000)).job_id
    doomed = (await producer.enqueue(queue_name, "send", {"n": 2})).job_id
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
        await page.goto(f"{base}/queues/{queue_name}/jobs/{later}")
        await expect(page.locator("td.where")).to_have_text("scheduled")
        shot = tmp_path / "scheduled.png"
        await page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("EMQ_UPDATE_SCREENSHOT"):
            shutil.copyfile(shot, repo_root / "docs" / "images" / "dashboard-job-scheduled.png")
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
