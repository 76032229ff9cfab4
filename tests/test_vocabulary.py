"""One vocabulary: a job is retried, dead (dead-lettered) or completed, in stats, events,
metrics and the dashboard; the old "failed" names stay as aliases where others read them (the
stats JSON key, the event on the wire, the metric)."""

from __future__ import annotations

import anyio
import httpx
from click.testing import CliRunner
from redis.asyncio import Redis

from emq_worker import Producer
from emq_worker.cli.main import main
from emq_worker.dashboard.app import create_app
from emq_worker.dashboard.settings import DashboardSettings
from emq_worker.jobs.events import open_events
from emq_worker.observe.exposition import WorkerCollector
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Failure, HeldLease

RECEIPT_MS = 60_000


async def retry_one_kill_one(client: Redis, queue_name: str) -> list[str]:
    """Claim two jobs, retry one, dead-letter the other; the events published meanwhile."""
    queue = Queue(client, Scripts(), queue_name)
    for _ in range(2):
        await Producer(client).enqueue(queue_name, "charge")
    async with open_events(client, queue_name) as stream:
        first, second = (await queue.claim(2, 30_000)).jobs
        retry = Failure(HeldLease(first.id, first.token, first.nonce), 0, 3, "boom")
        kill = Failure(HeldLease(second.id, second.token, second.nonce), 0, 0, "gave up")
        await queue.settle([retry, kill], RECEIPT_MS)
        names = []
        async for event in stream:
            names.append(event.event)
            if event.event == "dead":
                break
    return names


async def test_a_retry_is_published_as_retried_and_as_failed_its_old_name(
    client: Redis, queue_name: str
) -> None:
    names = await retry_one_kill_one(client, queue_name)
    assert names == ["claimed", "claimed", "retried", "failed", "dead"]


async def test_stats_says_dead_lettered_and_keeps_failed_in_its_json(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    await retry_one_kill_one(client, queue_name)
    url = ["--redis-url", redis_url]

    async def cli(*args: str) -> str:  # in a thread: the command runs its own event loop
        return (await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))).output

    table = (await cli("stats", "-q", queue_name, *url)).splitlines()
    assert table[0].split() == [
        "queue",
        "paused",
        "pending",
        "active",
        "scheduled",
        "dead",
        "completed",
        "dead_lettered",
    ]
    as_json = await cli("stats", "-q", queue_name, "--json", *url)
    assert '"dead_lettered": 1' in as_json
    assert '"failed": 1' in as_json  # the old key, for scripts that read it
    app = create_app(DashboardSettings(redis_url=redis_url), client)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as http:
        page = (await http.get("/")).text
    assert '<th class="num">dead_lettered</th>' in page
    assert '<th class="num">failed</th>' not in page


def test_retries_are_counted_as_retried_and_under_the_old_metric_name() -> None:
    counters = Counters(retried=2)
    collector = WorkerCollector(counters, [], None)  # type: ignore[arg-type]
    values: dict[str, float] = {}
    for family in collector.collect():  # the job counters come first, before the beat's
        values[family.name] = family.samples[0].value
        if family.name == "emq_jobs_dead_lettered":
            break
    assert values["emq_jobs_retried"] == 2
    assert values["emq_jobs_failed"] == 2  # the old name, for dashboards that read it
