"""Fair lanes and priorities on the surfaces: `enqueue --group/--priority`, `emq-worker lanes`,
lanes in `stats` and /metrics (bounded), typed task handles, the testing kit, and a real worker
serving limited lanes."""

from __future__ import annotations

import json

import anyio
import pytest
from click.testing import CliRunner, Result
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.cli.main import main
from emq_worker.observe.http import fetch
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.lane_verbs import LANES_SHOWN, limit_lane
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.testing import run_until_idle
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually
from tests.test_http import HOST, http_settings, port_of, samples


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", url])


def test_enqueue_puts_a_job_in_a_lane_at_a_priority(redis_url: str, queue_name: str) -> None:
    sent = cli(
        redis_url,
        *("enqueue", "-q", queue_name, "charge", "{}", "--group", "t-1", "--priority", "-2"),
        "--json",
    )
    assert sent.exit_code == 0, sent.output
    job_id = json.loads(sent.output)["job_id"]
    shown = cli(redis_url, "lanes", "list", "-q", queue_name, "--json")
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.output)
    assert (view["groups"], view["waiting"], view["serviceable"]) == (1, 1, 1)
    assert view["deepest"][0]["group"] == "t-1"
    row = json.loads(cli(redis_url, "inspect", job_id, "-q", queue_name, "--json").output)
    assert row["where"] == "pending"
    assert (row["row"]["group"], row["row"]["priority"]) == ("t-1", "-2")


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [("--group", "a:b", "'a:b'"), ("--priority", "2000000", "2000000")],
)
def test_enqueue_refuses_a_bad_group_or_priority_naming_it(
    redis_url: str, flag: str, value: str, named: str
) -> None:
    result = cli(redis_url, "enqueue", "-q", "q", "charge", flag, value)
    assert result.exit_code == 2
    assert named in result.output


def test_lanes_pause_resume_and_limit(redis_url: str, queue_name: str) -> None:
    for group in ("a", "b"):
        assert cli(redis_url, "enqueue", "-q", queue_name, "t", "--group", group).exit_code == 0
    paused = cli(redis_url, "lanes", "pause", "-q", queue_name, "a")
    assert paused.exit_code == 0, paused.output
    assert "paused lane 'a'" in paused.output
    limited = cli(redis_url, "lanes", "limit", "-q", queue_name, "b", "3", "--json")
    assert json.loads(limited.output) == {"queue": queue_name, "group": "b", "limit": 3}
    table = cli(redis_url, "lanes", "list", "-q", queue_name).output
    assert table.splitlines()[1:3] == [
        "a      1        0       -      yes",
        "b      1        0       3      no",
    ]
    assert "2 lanes, 1 in rotation, 2 jobs waiting in lanes" in table
    assert "resumed lane 'a'" in cli(redis_url, "lanes", "resume", "-q", queue_name, "a").output
    cleared = cli(redis_url, "lanes", "limit", "-q", queue_name, "b", "--clear", "--json")
    assert json.loads(cleared.output)["limit"] is None
    both = cli(redis_url, "lanes", "limit", "-q", queue_name, "b", "3", "--clear")
    assert both.exit_code == 2
    assert cli(redis_url, "lanes", "pause", "-q", queue_name, "bad group").exit_code == 2


def test_stats_show_lanes_only_for_a_queue_that_has_them(redis_url: str, queue_name: str) -> None:
    flat, grouped = f"{queue_name}.flat", f"{queue_name}.lanes"
    assert cli(redis_url, "enqueue", "-q", flat, "t").exit_code == 0
    assert cli(redis_url, "enqueue", "-q", grouped, "t", "--group", "g").exit_code == 0
    report = json.loads(cli(redis_url, "stats", "-q", flat, "-q", grouped, "--json").output)
    by_queue = {row["queue"]: row for row in report["queues"]}
    assert "lanes" not in by_queue[flat]
    assert by_queue[grouped]["pending"] == 0
    assert by_queue[grouped]["lanes"]["waiting"] == 1
    text = cli(redis_url, "stats", "-q", grouped).output
    assert f"{grouped}: 1 lanes, 1 in rotation, 1 jobs waiting in lanes" in text


async def test_metrics_list_the_deepest_lanes_only(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    for i in range(LANES_SHOWN + 5):
        for _ in range(i + 1):
            await producer.enqueue(queue_name, "t", group=f"g{i:02d}")
    await producer.queue(queue_name).pause()
    async with running_worker(http_settings(queue_name, redis_url), App()) as worker:
        status, body = await fetch(HOST, port_of(worker), "/metrics")
    assert status == 200
    got = samples(body)
    depths = {
        dict(labels)["group"]: value
        for (name, labels), value in got.items()
        if name == "emq_lane_depth"
    }
    assert len(depths) == LANES_SHOWN
    assert min(depths.values()) == 6  # the five shallowest are left out
    assert got[("emq_lanes", (("queue", queue_name),))] == LANES_SHOWN + 5
    assert got[("emq_lanes_waiting", (("queue", queue_name),))] == sum(range(1, LANES_SHOWN + 6))


async def test_task_handles_carry_group_and_priority(client: Redis, queue_name: str) -> None:
    app = App()

    @app.task(queue=queue_name)
    async def charge(ctx: JobContext, order: str) -> None:
        return None

    handle = await charge.with_options(group="t-9", priority=3).enqueue(Producer(client), order="A")
    row = await client.hgetall(QueueKeys.of(queue_name).job(handle.job_id))
    assert (row[b"group"], row[b"priority"]) == (b"t-9", b"3")


async def test_run_until_idle_waits_for_the_lanes(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    ran: list[str] = []

    @app.task
    async def note(ctx: JobContext, group: str) -> None:
        ran.append(group)

    producer = Producer(client)
    for group in ("a", "a", "b"):
        await producer.enqueue(queue_name, "note", {"group": group}, group=group)
    counters = await run_until_idle(app, queue_name, url=redis_url)
    assert counters.completed == 3
    assert sorted(ran) == ["a", "a", "b"]


async def test_a_worker_keeps_each_group_within_its_limit(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    running: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}
    done: list[str] = []

    @app.task
    async def hold(ctx: JobContext, group: str) -> None:
        running[group] += 1
        peak[group] = max(peak[group], running[group])
        await anyio.sleep(0.02)  # the job's work: long enough for the claims to overlap
        running[group] -= 1
        done.append(group)

    queue = Queue(client, Scripts(), queue_name)
    await limit_lane(queue, "a", 2)
    producer = Producer(client)
    for group in ["a"] * 20 + ["b"] * 20:
        await producer.enqueue(queue_name, "hold", {"group": group}, group=group)
    async with running_worker(worker_settings(queue_name, redis_url, concurrency=8), app):
        await eventually(lambda: _true(len(done) == 40), timeout=20, what="40 jobs done")
    assert peak["a"] <= 2
    assert peak["b"] > 2


async def _true(value: bool) -> bool:
    return value
