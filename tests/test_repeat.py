"""Repeatable jobs: due times on the server clock (every and cron), minting each occurrence exactly
once when workers race (in-process and two real worker processes), pause, resume and remove."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.jobs.repeat import (
    RepeatFirer,
    Schedule,
    get_repeat,
    list_repeats,
    pause_repeat,
    remove_repeat,
    resume_repeat,
    validate_repeat_name,
)
from emq_worker.jobs.sync_producer import sync_producer
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.connection import connect
from tests.support.processes import WorkerProcesses
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

MINUTE_MS = 60_000


async def server_now_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def utc_ms(year: int, month: int, day: int, hour: int, minute: int, second: int = 0) -> int:
    moment = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


async def make_due(client: Redis, queue: str, name: str, due_ms: int) -> None:
    """Put the repeat's next due time at `due_ms` (in the past: it is due now)."""
    await client.zadd(f"emq:{{{queue}}}:repeat", {name: due_ms}, xx=True)


async def pending_jobs(client: Redis, queue: str) -> list[dict[Any, Any]]:
    ids = await client.zrange(f"emq:{{{queue}}}:pending", 0, -1)
    return [await client.hgetall(f"emq:{{{queue}}}:job:{text(job_id)}") for job_id in ids]


# --- due times ------------------------------------------------------------------------------


def test_every_advances_past_now_and_collapses_missed_occurrences() -> None:
    every = Schedule(every_ms=1_000)
    assert every.first(10_000) == 11_000
    assert every.following(11_000, 11_000) == 12_000
    assert every.following(11_000, 11_999) == 12_000
    # Down for 5.5 s: one occurrence is minted now, the next is on the original grid.
    assert every.following(11_000, 16_500) == 17_000


def test_cron_due_times_are_utc_and_after_now() -> None:
    cron = Schedule(cron="*/5 * * * *")
    now = utc_ms(2026, 11, 30, 3, 58, 12)
    assert cron.first(now) == utc_ms(2026, 11, 30, 4, 0)
    assert cron.following(utc_ms(2026, 11, 30, 4, 0), utc_ms(2026, 11, 30, 4, 0)) == utc_ms(
        2026, 11, 30, 4, 5
    )
    # Missed occurrences collapse: the following one is after the server's now.
    assert cron.following(utc_ms(2026, 11, 30, 4, 0), utc_ms(2026, 11, 30, 4, 17, 1)) == utc_ms(
        2026, 11, 30, 4, 20
    )
    assert Schedule(cron="0 9 * * 1").first(utc_ms(2026, 11, 30, 9, 0)) == utc_ms(2026, 12, 7, 9, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every_ms": 0}, "every_ms must be an integer >= 1; got 0"),
        ({"cron": "*/5 * * *"}, "not a valid cron expression: '\\*/5 \\* \\* \\*'"),
        ({}, "give every_ms or cron, exactly one"),
        ({"every_ms": 5, "cron": "* * * * *"}, "give every_ms or cron, exactly one"),
    ],
)
def test_bad_schedules_are_refused_naming_the_value(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Schedule(**kwargs)  # type: ignore[arg-type]


def test_repeat_names_are_checked() -> None:
    assert validate_repeat_name("nightly-report.v2") == "nightly-report.v2"
    with pytest.raises(ConfigError, match="got 'a b'"):
        validate_repeat_name("a b")


# --- registering and minting ----------------------------------------------------------------


async def test_register_times_the_first_occurrence_on_the_server_clock(
    client: Redis, queue_name: str
) -> None:
    producer = Producer(client)
    before = await server_now_ms(client)
    info = await producer.repeat(queue_name, "tick", "noop", every_ms=MINUTE_MS)
    after = await server_now_ms(client)
    assert info.next_due_ms is not None
    assert before + MINUTE_MS <= info.next_due_ms <= after + MINUTE_MS

    cron = await producer.repeat(queue_name, "report", "noop", cron="*/5 * * * *")
    assert cron.next_due_ms is not None
    assert cron.next_due_ms % (5 * MINUTE_MS) == 0
    assert after < cron.next_due_ms <= after + 5 * MINUTE_MS

    # Registering the same thing again (an app at every start) leaves the schedule alone.
    again = await producer.repeat(queue_name, "tick", "noop", every_ms=MINUTE_MS)
    assert again.next_due_ms == info.next_due_ms
    changed = await producer.repeat(queue_name, "tick", "noop", {"n": 1}, every_ms=MINUTE_MS)
    assert json.loads(changed.payload) == {"task": "noop", "kwargs": {"n": 1}}


async def test_a_due_occurrence_is_minted_once_and_the_schedule_advances(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    await Producer(client).repeat(queue_name, "tick", "noop", {"n": 7}, every_ms=MINUTE_MS)
    now = await server_now_ms(client)
    await make_due(client, queue_name, "tick", now - 10)
    firer = RepeatFirer(SnowflakeMinter(1))
    queue = Queue(client, scripts, queue_name)

    due_in = await firer.fire(queue)
    [row] = await pending_jobs(client, queue_name)
    assert row[b"state"] == b"pending"
    assert row[b"repeat"] == b"tick"
    assert json.loads(row[b"payload"]) == {"task": "noop", "kwargs": {"n": 7}}
    info = await get_repeat(client, queue_name, "tick")
    assert info is not None
    assert info.next_due_ms == now - 10 + MINUTE_MS
    assert info.minted == 1
    assert due_in is not None
    assert 0 < due_in <= MINUTE_MS

    await firer.fire(queue)  # nothing is due any more
    assert len(await pending_jobs(client, queue_name)) == 1


async def test_two_firers_racing_mint_each_occurrence_exactly_once(
    redis_url: str, client: Redis, queue_name: str
) -> None:
    producer = Producer(client)
    names = [f"r{i}" for i in range(20)]
    for name in names:
        await producer.repeat(queue_name, name, "noop", every_ms=MINUTE_MS)
    clients = [connect(redis_url, DEFAULT_WIRE_VERSION) for _ in range(2)]
    queues = [Queue(c, Scripts(), queue_name) for c in clients]
    # Both firers share one node id, so their minted ids collide too: the script refuses a
    # taken id and the firer mints another, rather than lose or double the occurrence.
    firers = [RepeatFirer(SnowflakeMinter(7)) for _ in range(2)]
    try:
        rounds = 5
        for round_no in range(rounds):
            now = await server_now_ms(client)
            for name in names:
                await make_due(client, queue_name, name, now - 1_000 - round_no)
            async with anyio.create_task_group() as group:
                for firer, queue in zip(firers, queues, strict=True):
                    group.start_soon(firer.fire, queue)
    finally:
        for c in clients:
            await c.aclose()
    jobs = await pending_jobs(client, queue_name)
    assert len(jobs) == rounds * len(names)
    for name in names:
        info = await get_repeat(client, queue_name, name)
        assert info is not None
        assert info.minted == rounds


async def test_a_worker_mints_between_beats_at_each_due_time(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    runs: list[int] = []

    @app.task
    async def tick(ctx: JobContext) -> None:
        runs.append(ctx.attempt)

    await Producer(client).repeat(queue_name, "tick", "tick", every_ms=100)
    settings = worker_settings(queue_name, redis_url, beat_ms=10_000)
    async with running_worker(settings, app):
        # With a 10 s beat, only parking until the repeat's due time mints 3 within the wait.
        await eventually(lambda: _at_least(runs, 3), timeout=8, what="3 occurrences run")


async def _at_least(items: list[int], n: int) -> bool:
    await anyio.lowlevel.checkpoint()
    return len(items) >= n


async def test_two_worker_processes_mint_each_occurrence_once(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    every_ms = 300
    with WorkerProcesses(tmp_path / "workers") as workers:
        started = [
            workers.start(name, queue=queue_name, redis_url=redis_url, lease_ms=5_000, beat_ms=200)
            for name in ("a", "b")
        ]
        for worker in started:
            await worker.wait_event("worker_started", within_s=30)
        info = await Producer(client).repeat(queue_name, "tick", "noop", every_ms=every_ms)
        assert info.next_due_ms is not None
        first_due = info.next_due_ms

        async def minted_ten() -> bool:
            found = await get_repeat(client, queue_name, "tick")
            return found is not None and found.minted >= 10

        await eventually(minted_ten, timeout=30, what="10 occurrences minted")
        await pause_repeat(client, queue_name, "tick")
        final = await get_repeat(client, queue_name, "tick")
        assert final is not None

        async def all_ran() -> bool:
            return len(workers.ledger.find("done")) >= final.minted

        await eventually(all_ran, timeout=20, what="every minted job run")
    last_due = int(await client.hget(f"emq:{{{queue_name}}}:repeat:tick", "last_due") or 0)
    due_times = (last_due - first_due) // every_ms + 1
    # A double mint would put more jobs than due times (a late beat may skip some, never add).
    assert final.minted <= due_times
    assert len(workers.ledger.find("start")) == final.minted
    assert len({entry.pid for entry in workers.ledger.find("start")}) >= 1


# --- pause, resume, remove ------------------------------------------------------------------


async def test_a_paused_repeat_mints_nothing_until_resumed(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    await Producer(client).repeat(queue_name, "tick", "noop", every_ms=MINUTE_MS)
    now = await server_now_ms(client)
    await make_due(client, queue_name, "tick", now - 10)
    paused = await pause_repeat(client, queue_name, "tick")
    assert (paused.paused, paused.next_due_ms) == (True, None)
    queue = Queue(client, scripts, queue_name)
    firer = RepeatFirer(SnowflakeMinter(1))
    assert await firer.fire(queue) is None
    assert await pending_jobs(client, queue_name) == []
    score = await client.zscore(f"emq:{{{queue_name}}}:repeat", "tick")
    assert score is not None
    assert math.isinf(score)

    resumed = await resume_repeat(client, queue_name, "tick")
    assert not resumed.paused
    assert resumed.next_due_ms is not None
    assert resumed.next_due_ms > now  # missed occurrences are skipped, not minted at once
    assert await firer.fire(queue) is not None
    assert await pending_jobs(client, queue_name) == []


async def test_remove_deletes_the_schedule_and_foreign_members_are_left_alone(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    await Producer(client).repeat(queue_name, "tick", "noop", every_ms=MINUTE_MS)
    assert await remove_repeat(client, queue_name, "tick")
    assert not await remove_repeat(client, queue_name, "tick")
    assert await list_repeats(client, queue_name) == []
    # A member without our spec (EchoMQ's own Repeat registry uses these key names) is skipped
    # and never touched.
    await client.zadd(f"emq:{{{queue_name}}}:repeat", {"theirs": 1})
    await client.hset(f"emq:{{{queue_name}}}:repeat:theirs", "every", "5000")
    assert await RepeatFirer(SnowflakeMinter(1)).fire(Queue(client, scripts, queue_name)) is None
    assert await client.zscore(f"emq:{{{queue_name}}}:repeat", "theirs") == 1
    assert await pending_jobs(client, queue_name) == []
    with pytest.raises(ConfigError, match="no repeat named 'tick'"):
        await pause_repeat(client, queue_name, "tick")


# --- emq-worker repeat ----------------------------------------------------------------------


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", url])


def test_repeat_cli_lists_pauses_resumes_and_removes(redis_url: str, queue_name: str) -> None:
    async def register() -> None:
        client = connect(redis_url, DEFAULT_WIRE_VERSION)
        try:
            await Producer(client).repeat(queue_name, "report", "noop", cron="0 * * * *")
        finally:
            await client.aclose()

    anyio.run(register)
    listed = cli(redis_url, "repeat", "list", "--queue", queue_name, "--json")
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.output)
    assert (entry["name"], entry["schedule"], entry["paused"]) == (
        "report",
        "cron 0 * * * *",
        False,
    )
    assert entry["next_due_ms"] % 3_600_000 == 0

    paused = cli(redis_url, "repeat", "pause", "--queue", queue_name, "report")
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.output
    assert "paused" in cli(redis_url, "repeat", "list", "--queue", queue_name).output
    resumed = cli(redis_url, "repeat", "resume", "--queue", queue_name, "report")
    assert "next due" in resumed.output

    removed = cli(redis_url, "repeat", "remove", "--queue", queue_name, "report")
    assert removed.exit_code == 0, removed.output
    missing = cli(redis_url, "repeat", "remove", "--queue", queue_name, "report")
    assert missing.exit_code == 1
    assert "no repeat named 'report'" in missing.output
    bad = cli(redis_url, "repeat", "pause", "--queue", queue_name, "a b")
    assert bad.exit_code == 2
    assert "'a b'" in bad.output


def test_repeat_add_registers_from_the_shell_and_refuses_a_bad_schedule_by_name(
    redis_url: str, queue_name: str
) -> None:
    added = cli(
        redis_url, "repeat", "add", "--queue", queue_name, "--every-ms", "60000",
        "digest", "noop", '{"kind": "daily"}',
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert "every 60000 ms; next due" in added.output
    again = cli(
        redis_url, "repeat", "add", "--queue", queue_name, "--every-ms", "60000",
        "digest", "noop", '{"kind": "daily"}',
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    listed = cli(redis_url, "repeat", "list", "--queue", queue_name, "--json")
    [entry] = json.loads(listed.output)
    assert entry["name"] == "digest"
    assert json.loads(entry["payload"]) == {"task": "noop", "kwargs": {"kind": "daily"}}
    assert entry["minted"] == 0

    both = cli(
        redis_url, "repeat", "add", "--queue", queue_name, "--every-ms", "5", "--cron",
        "* * * * *", "x", "noop",
    )  # fmt: skip
    assert both.exit_code == 2
    assert "exactly one" in both.output
    bad_cron = cli(
        redis_url, "repeat", "add", "--queue", queue_name, "--cron", "61 * *", "y", "noop"
    )
    assert bad_cron.exit_code == 2
    assert "'61 * *'" in bad_cron.output
    not_object = cli(
        redis_url, "repeat", "add", "--queue", queue_name, "--every-ms", "5", "z", "noop", "[1]"
    )
    assert not_object.exit_code == 2
    assert "must be a JSON object; got list" in not_object.output


def test_the_sync_producer_registers_repeats(redis_url: str, queue_name: str) -> None:
    with sync_producer(redis_url) as producer:
        info = producer.repeat(queue_name, "tick", "noop", every_ms=1_000)
    assert info.schedule == Schedule(every_ms=1_000)
    assert info.next_due_ms is not None
