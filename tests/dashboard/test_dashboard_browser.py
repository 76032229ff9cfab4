"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright.

Each test serves the app with uvicorn in-process on a free port, runs a worker in-process, and
watches the pages change as jobs move: leases held and renewed, a crashed holder's lease reaped
(the seed's timeline: no renewal lapses, renewal holds to the end), a dead job retried by a click.
The timeline test keeps a screenshot in its tmp dir (a test artifact); with EMQ_UPDATE_SCREENSHOT=1
it also refreshes docs/images/dashboard-leases.png (docs/how-to/dashboard.md), so a plain test run
leaves the tree clean.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from playwright.async_api import Browser, Page, async_playwright, expect
from redis.asyncio import Redis

from emq_worker import App, JobContext
from emq_worker.dashboard.app import create_app
from emq_worker.dashboard.settings import DashboardSettings
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import HeldLease
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually, until

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed at /usr/bin/chromium (.ci/run installs it)",
    ),
    pytest.mark.fault,
]
SEEN_MS = 20_000
"""How long a page may take to show what the test waits for (a loaded 2-core machine)."""
CRASHED_LEASE_MS = 2_500


@asynccontextmanager
async def serving(settings: DashboardSettings) -> AsyncIterator[str]:
    """uvicorn in this event loop on a free port; yields the base URL."""
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        try:
            await until(lambda: server.started, what="uvicorn to start")
            port = server.servers[0].sockets[0].getsockname()[1]
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def page_on(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 760})
    page = await context.new_page()
    # Every `expect` without its own timeout waits as long as a loaded machine needs: the
    # default 5 s failed the tour at load 15 (a click on a plain link, its page not shown yet).
    expect.set_options(timeout=SEEN_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
    try:
        yield page
    finally:
        await context.close()
    assert errors == [], errors  # no script error, and nothing from a payload ever ran


def dashboard_settings(redis_url: str, **overrides: Any) -> DashboardSettings:
    options: dict[str, Any] = {"redis_url": redis_url, "allow_actions": True, "poll_ms": 250}
    options.update(overrides)
    return DashboardSettings(**options)


def holding_app(release: anyio.Event, started: list[str]) -> App:
    app = App()

    @app.task
    async def charge(ctx: JobContext, order: str) -> None:
        started.append(order)
        await release.wait()

    return app


async def test_the_timeline_shows_renewed_leases_and_a_crashed_holders_lease_reaped(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, repo_root: Path
) -> None:
    queue_name = "orders." + queue_name.split(".", 2)[-1]  # unique, and reads well in the shot
    producer = Producer(client)
    queue = Queue(client, Scripts(), queue_name)
    crashed = (await producer.enqueue(queue_name, "charge", {"order": "A-crashed"})).job_id
    # A holder that claims and then dies: its lease is never renewed, so it lapses.
    assert [job.id for job in (await queue.claim(1, CRASHED_LEASE_MS)).jobs] == [crashed]
    release, started = anyio.Event(), list[str]()
    settings = worker_settings(queue_name, redis_url, lease_ms=3_000, grace_ms=1_000)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
        await page.goto(f"{base}/queues/{queue_name}")
        # The dashboard sees the lapsing lease before any worker (and so any reaper) runs.
        await expect(page.locator(f'tr.lease:not(.ended)[data-job="{crashed}"]')).to_be_attached()
        async with running_worker(settings, holding_app(release, started)):
            try:
                healthy, shot = await watch_leases(page, producer, queue_name, crashed, tmp_path)
                if os.environ.get("EMQ_UPDATE_SCREENSHOT"):
                    shutil.copyfile(shot, repo_root / "docs" / "images" / "dashboard-leases.png")
            finally:
                release.set()
            for job_id in [crashed, *healthy]:
                done = page.locator(f'tr.ended[data-job="{job_id}"][data-status="completed"]')
                await expect(done).to_have_count(1, timeout=SEEN_MS)
            await page.goto(base)
            row = page.locator(f'tr[data-queue="{queue_name}"]')
            await expect(row.locator("td.completed")).to_have_text("3", timeout=SEEN_MS)
            await expect(row.locator("td.active")).to_have_text("0", timeout=SEEN_MS)
    assert sorted(started) == ["A-crashed", "B-1", "B-2"]
    assert shot.stat().st_size > 10_000


async def watch_leases(
    page: Page, producer: Producer, queue_name: str, crashed: JobId, tmp_path: Path
) -> tuple[list[JobId], Path]:
    """Enqueue two jobs and watch their leases renewed, and the crashed holder's lease reaped
    and claimed again; returns the two jobs' ids and the screenshot taken then."""
    healthy = [
        (await producer.enqueue(queue_name, "charge", {"order": f"B-{n}"})).job_id for n in (1, 2)
    ]
    for job_id in healthy:
        row = page.locator(f'tr.lease:not(.ended)[data-job="{job_id}"]')
        await expect(row).to_have_attribute("data-status", "held", timeout=SEEN_MS)
        await expect(row.locator("rect.renewal").nth(1)).to_be_attached(timeout=SEEN_MS)
    reaped = page.locator(f'tr.lease.ended[data-job="{crashed}"]')
    await expect(reaped).to_have_attribute("data-status", "reaped", timeout=SEEN_MS)
    again = page.locator(f'tr.lease:not(.ended)[data-job="{crashed}"]')
    await expect(again.locator("td.attempts")).to_have_text("2", timeout=SEEN_MS)
    await expect(again.locator("rect.renewal").first).to_be_attached(timeout=SEEN_MS)
    shot = tmp_path / "dashboard.png"
    await page.screenshot(path=str(shot), full_page=True)
    return healthy, shot


def flaky_app(fixed: list[bool]) -> App:
    app = App()

    @app.task(max_attempts=1)
    async def charge(ctx: JobContext, order: str) -> None:
        if not fixed:
            raise ValueError(f"<b>card declined</b> for {order}")

    return app


async def dead_count(queue: Queue) -> int:
    return (await queue.counts()).dead


async def test_a_dead_job_is_retried_with_a_click_and_then_completes(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    fixed: list[bool] = []
    settings = worker_settings(queue_name, redis_url, grace_ms=1_000)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
        running_worker(settings, flaky_app(fixed)),
    ):
        job_id = (await Producer(client).enqueue(queue_name, "charge", {"order": "D1"})).job_id
        await eventually(lambda: dead_count(queue), what="the job to die")
        await page.goto(f"{base}/queues/{queue_name}/dead")
        row = page.locator(f'tr[data-job="{job_id}"]')
        await expect(row.locator("td.last-error")).to_contain_text(
            "<b>card declined</b> for D1"  # shown as text, not markup
        )
        fixed.append(True)
        await row.get_by_role("button", name="Retry").click()
        await expect(page.locator("p.flash")).to_contain_text("retried 1 dead job(s)")
        await expect(page.get_by_text("No dead jobs.")).to_be_visible()
        await page.goto(f"{base}/queues/{queue_name}")
        stats = page.locator(f'tr[data-queue="{queue_name}"]')
        await expect(stats.locator("td.completed")).to_have_text("1", timeout=SEEN_MS)
        await expect(stats.locator("td.dead")).to_have_text("0")


async def test_purge_asks_first_and_pause_toggles_in_the_browser(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    settings = worker_settings(queue_name, redis_url, grace_ms=1_000)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
        running_worker(settings, flaky_app([])),
    ):
        job_id = (await Producer(client).enqueue(queue_name, "charge", {"order": "P1"})).job_id
        await eventually(lambda: dead_count(queue), what="the job to die")
        await page.goto(f"{base}/queues/{queue_name}/dead")
        await page.locator(f'tr[data-job="{job_id}"]').get_by_role("button", name="Purge").click()
        await expect(page.locator("h1")).to_contain_text("Purge 1 dead job(s)")
        assert await queue.state_of(job_id) == "dead"  # nothing happens before the yes
        await page.get_by_role("button", name="Yes, purge").click()
        await expect(page.get_by_text("No dead jobs.")).to_be_visible()
        assert await queue.state_of(job_id) == "absent"

        await page.goto(f"{base}/queues/{queue_name}")
        await page.get_by_role("button", name="Pause").click()
        await expect(page.locator("td.paused")).to_have_text("paused")
        assert await client.hexists(queue.keys.meta, "paused")
        await page.get_by_role("button", name="Resume").click()
        await expect(page.locator("td.paused")).to_have_text("running")


async def test_a_payload_and_an_error_with_markup_are_shown_as_text_and_never_run(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    script = "<script>window.pwned = 1; alert('pwned')</script>"
    image = "<img src=x onerror=\"window.pwned = 2; alert('pwned')\">"
    job_id = await _dead_with(queue, payload_note=script, error=image)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
    ):
        for path in (f"/queues/{queue_name}/jobs/{job_id}", f"/queues/{queue_name}/dead"):
            await page.goto(base + path)
            await expect(page.locator("td.last-error, pre.last-error").first).to_contain_text(image)
        await page.goto(f"{base}/queues/{queue_name}/jobs/{job_id}")
        await expect(page.locator("pre.payload")).to_contain_text(script)
        # Let the live fragment refresh once too: innerHTML of escaped text stays text.
        await expect(page.locator("#job")).to_have_attribute("data-refreshed", "1", timeout=SEEN_MS)
        await expect(page.locator("pre.payload")).to_contain_text(script)
        assert await page.evaluate("window.pwned") is None
        assert await page.locator("main script, main img").count() == 0


async def _dead_with(queue: Queue, *, payload_note: str, error: str) -> JobId:
    await Producer(queue.client).enqueue(queue.name, "charge", {"note": payload_note})
    [job] = (await queue.claim(1, 30_000)).jobs
    await queue.fail(
        HeldLease(job.id, job.token, job.nonce), 1000, delay_ms=0, max_attempts=0, error=error
    )
    return job.id


async def test_a_running_jobs_page_follows_its_progress_and_logs_and_cancels_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    queue = Queue(client, Scripts(), queue_name)
    release, started = anyio.Event(), list[str]()
    settings = worker_settings(queue_name, redis_url, grace_ms=1_000)
    async with (
        serving(dashboard_settings(redis_url)) as base,
        chromium() as browser,
        page_on(browser) as page,
        running_worker(settings, holding_app(release, started)),
    ):
        try:
            job_id = (await Producer(client).enqueue(queue_name, "charge", {"order": "R1"})).job_id
            await until(lambda: started == ["R1"], what="the job to start")
            await page.goto(f"{base}/queues/{queue_name}/jobs/{job_id}")
            await expect(page.locator("td.where")).to_have_text("active")
            # What ctx.progress(40) and ctx.append_log(...) leave in the keyspace:
            await client.hset(queue.keys.job(job_id), "progress", "40")
            await client.rpush(queue.keys.logs(job_id), "charging card <4242>")
            await expect(page.locator("progress")).to_have_attribute("value", "40.0")
            await expect(page.locator("pre.logs")).to_contain_text("charging card <4242>")
            await page.get_by_role("button", name="Cancel this running job").click()
            await expect(page.locator("p.flash")).to_contain_text("cancel requested")
            await expect(page.locator("td.where")).to_have_text("dead", timeout=SEEN_MS)
            await expect(page.locator("pre.last-error")).to_contain_text("cancel")
        finally:
            release.set()
