"""The read side of issue 28 in Debian's headless Chromium: a lone minute on the run-time graph,
a job's return value, flow parents waiting for their children, jobs waiting in lanes, and the
retries. With EMQ_UPDATE_SCREENSHOT=1 the new pages' screenshots are refreshed in docs/images/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import expect
from redis.asyncio import Redis

from emq_worker import FlowJob, Producer
from emq_worker.jobs.results import encode_result
from emq_worker.observe.history_format import DURATION_BUCKET, MINUTE_MS, duration_bucket
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.servertime import server_ms
from emq_worker.protocol.values import Completion, HeldLease
from emq_worker.runtime.history_flush import HistoryRecorder
from tests.dashboard import test_dashboard_browser as kit
from tests.dashboard.test_dashboard_tour import shoot, watch_responses

pytestmark = [
    pytest.mark.skipif(not kit.CHROMIUM.exists(), reason="no Debian chromium"),
    pytest.mark.fault,
]

MARKS_DRAWN = """(selector) => [...document.querySelectorAll(selector)]
  .filter((el) => !el.classList.contains("hit"))
  .map((el) => el.getBBox())
  .filter((box) => box.width > 0 || box.height > 0).length"""
"""How many shapes matching `selector` cover any area (a bare moveto covers none)."""


async def lone_minute(client: Redis, keys: QueueKeys, start: int, seconds: float) -> None:
    """One job completed in the minute starting at `start`, run in `seconds`."""
    await client.hset(
        keys.history_minute(start),
        mapping={
            "completed": 1,
            "dur_sum_us": round(seconds * 1_000_000),
            "dur_count": 1,
            f"{DURATION_BUCKET}{duration_bucket(seconds)}": 1,
        },
    )


async def test_a_lone_minute_of_runs_is_drawn_on_the_run_time_graph(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    keys = QueueKeys.of(queue_name)
    now = await server_ms(client, keys.pending)
    current = now - now % MINUTE_MS
    await client.zadd(keys.pending, {"JOB0000000000a": 0})  # the queue exists
    await lone_minute(client, keys, current - 10 * MINUTE_MS, 0.25)  # quiet on either side
    await lone_minute(client, keys, current, 0.5)  # the minute still filling, after a quiet one
    async with (
        kit.serving(kit.dashboard_settings(redis_url)) as base,
        kit.chromium() as browser,
        kit.page_on(browser) as page,
    ):
        await page.goto(f"{base}/queues/{queue_name}")
        chart = page.locator("#durations")
        await expect(chart).to_have_attribute("data-drawn", "1", timeout=kit.SEEN_MS)
        for series in ("mean", "p95"):
            drawn = await page.evaluate(MARKS_DRAWN, f"#durations svg .{series}")
            assert drawn == 2, (series, await chart.inner_html())


async def test_the_new_tabs_and_a_return_value_in_the_browser(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, repo_root: Path
) -> None:
    """The retries apart from the delayed jobs, the flow parents waiting for children, the
    jobs in lanes on the pending tab, and a completed job's return value: each reached by a
    click from the queue's page, with no request answering 4xx/5xx and no script error."""
    orders = "orders." + queue_name.split(".", 2)[-1]
    queue = Queue(client, Scripts(), orders)
    producer = Producer(client)
    paid = (await producer.enqueue(orders, "charge", {"order": "C-1", "amount": 1200})).job_id
    declined = (await producer.enqueue(orders, "charge", {"order": "C-2", "amount": 900})).job_id
    [first, second] = (await queue.claim(2, 30_000)).jobs
    assert (first.id, second.id) == (paid, declined)
    receipt, _ = encode_result({"receipt": "R-1001", "charged": 1200, "currency": "EUR"})
    await queue.settle(
        [Completion(HeldLease(paid, first.token, first.nonce), receipt, 60_000)], 1000
    )
    counters = Counters()  # what the worker's beat adds to the settled log
    counters.settled(orders, "charge", "completed", 0.42, (paid, 1))
    await HistoryRecorder(counters, "worker-1", 1000).flush([queue], 0.0)
    await queue.fail(
        HeldLease(declined, second.token, second.nonce),
        1000,
        delay_ms=600_000,
        max_attempts=5,
        error="CardDeclined: insufficient funds (attempt 1 of 5)",
    )
    await producer.enqueue(orders, "send_receipt", {"order": "C-0"}, delay_ms=3_600_000)
    flow = await producer.enqueue_flow(
        orders,
        FlowJob(
            "ship", {"order": "C-3"}, children=[FlowJob("pack", {"item": n}) for n in range(3)]
        ),
    )
    for group, jobs in (("tenant-big", 3), ("tenant-small", 1)):
        for n in range(jobs):
            await producer.enqueue(orders, "charge", {"order": f"{group}-{n}"}, group=group)
    async with (
        kit.serving(kit.dashboard_settings(redis_url)) as base,
        kit.chromium() as browser,
        kit.page_on(browser) as page,
    ):
        failures = watch_responses(page)
        await page.goto(f"{base}/queues/{orders}")
        await page.locator('nav.tabs a[data-tab="retries"]').click()
        await expect(page.locator("tbody tr[data-job]")).to_have_count(1)
        row = page.locator(f'tr[data-job="{declined}"]')
        await expect(row.locator("td.runs")).to_contain_text("in ")
        await expect(page.locator("td.last-error")).to_contain_text("CardDeclined")
        await shoot(page, "retries", tmp_path, repo_root)
        await page.locator('nav.tabs a[data-tab="waiting"]').click()
        parent = page.locator(f'tr[data-job="{flow.job_id}"]')
        await expect(parent.locator("td.outstanding")).to_have_text("3")
        await shoot(page, "waiting", tmp_path, repo_root)
        await parent.locator("a").first.click()
        await expect(page.locator("td.where")).to_have_text("awaiting_children")
        await page.goto(f"{base}/queues/{orders}/pending")
        await expect(page.locator('nav.tabs a[data-tab="pending"] .count')).to_have_text("7")
        await expect(page.locator("td.group", has_text="tenant-big")).to_have_count(3)
        await shoot(page, "pending-lanes", tmp_path, repo_root)
        await page.goto(f"{base}/queues/{orders}/jobs/{paid}")
        await expect(page.locator("pre.result")).to_contain_text('"receipt": "R-1001"')
        await expect(page.locator("td.where")).to_have_text("completed")
        await expect(page.locator('tr[data-attempt="1"] td.outcome')).to_have_text("completed")
        await shoot(page, "result", tmp_path, repo_root)
    assert failures == []
