"""The read side of issue 28 in Debian's headless Chromium: a lone minute on the run-time graph,
a job's return value, flow parents waiting for their children, jobs waiting in lanes, and the
retries. With EMQ_UPDATE_SCREENSHOT=1 the new pages' screenshots are refreshed in docs/images/.
"""

from __future__ import annotations

import pytest
from playwright.async_api import expect
from redis.asyncio import Redis

from emq_worker.observe.history_format import DURATION_BUCKET, MINUTE_MS, duration_bucket
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.servertime import server_ms
from tests.dashboard import test_dashboard_browser as kit

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
