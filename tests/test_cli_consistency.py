"""One style across the commands: the --redis-url help is one short line (the details are in
`emq-worker --help`), `repeat list` prints an aligned table with a header as `stats` does, and
the dashboard answers /favicon.ico instead of a 404 on every page."""

from __future__ import annotations

import json

import click
import httpx
import pytest
from click.testing import CliRunner
from redis.asyncio import Redis

from emq_worker.cli.main import main
from emq_worker.dashboard.app import create_app
from emq_worker.dashboard.settings import DashboardSettings


def subcommands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += subcommands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


def talks_to_redis(path: tuple[str, ...]) -> bool:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return any(param.name == "redis_url" for param in command.params)


@pytest.mark.parametrize("path", [p for p in subcommands(main) if talks_to_redis(p)], ids=" ".join)
def test_the_redis_url_help_is_one_short_line(path: tuple[str, ...]) -> None:
    shown = CliRunner().invoke(main, [*path, "--help"], terminal_width=100).output
    assert "--redis-url" in shown
    assert "Keep passwords out" not in shown
    assert "seed nodes" not in shown
    assert "see `emq-worker --help`" in shown


def test_the_top_level_help_holds_the_url_details() -> None:
    shown = CliRunner().invoke(main, ["--help"]).output
    assert "redis+cluster://" in shown
    assert "@PATH" in shown


def test_repeat_list_is_an_aligned_table_with_a_header(redis_url: str, queue_name: str) -> None:
    runner = CliRunner()
    url = ["--redis-url", redis_url]
    for name, every in (("short", "1000"), ("a-longer-name", "60000")):
        added = runner.invoke(
            main, ["repeat", "add", name, "tick", "-q", queue_name, "--every-ms", every, *url]
        )
        assert added.exit_code == 0, added.output
    lines = runner.invoke(main, ["repeat", "list", "-q", queue_name, *url]).output.splitlines()
    assert lines[0].split() == ["name", "schedule", "state", "next", "minted"]
    assert "\t" not in "\n".join(lines)
    column = lines[0].index("schedule")
    assert all(line[column - 2 : column] == "  " for line in lines[1:]), lines


async def test_the_dashboard_serves_a_favicon(client: Redis, redis_url: str) -> None:
    app = create_app(DashboardSettings(redis_url=redis_url, token="a-t0ken-for-the-tests"), client)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as http:
        icon = await http.get("/favicon.ico")  # no token: browsers ask before logging in
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")


def test_every_command_that_changes_something_takes_json() -> None:
    """`--json` everywhere an operator might script: the output is then one JSON document."""
    takes_json = {
        path
        for path in subcommands(main)
        if "--json" in CliRunner().invoke(main, [*path, "--help"]).output
    }
    wanted = {
        ("enqueue",), ("pause",), ("resume",), ("remove",), ("cancel",), ("clear",),
        ("stats",), ("inspect",), ("logs",), ("workers",), ("limit",),
        ("dead", "list"), ("dead", "retry"), ("dead", "purge"),
        ("repeat", "add"), ("repeat", "list"), ("repeat", "pause"), ("repeat", "resume"),
        ("repeat", "remove"),
    }  # fmt: skip
    assert wanted <= takes_json, wanted - takes_json


def test_json_output_parses(redis_url: str, queue_name: str) -> None:
    url = ["--redis-url", redis_url]
    runner = CliRunner()
    enqueued = runner.invoke(main, ["enqueue", "-q", queue_name, "noop", "--json", *url])
    job = json.loads(enqueued.output)
    assert job["duplicate"] is False
    paused = json.loads(runner.invoke(main, ["pause", "-q", queue_name, "--json", *url]).output)
    assert paused == {"queue": queue_name, "paused": True, "was_paused": False}
    removed = runner.invoke(main, ["remove", job["job_id"], "-q", queue_name, "--json", *url])
    assert json.loads(removed.output)["removed"] is True


ONE_QUEUE_VERBS = [
    ("pause",),
    ("resume",),
    ("limit",),
    ("dead", "list"),
    ("drain", "--yes"),
    ("clear", "--yes"),
    ("obliterate", "--yes"),
]


@pytest.mark.parametrize("form", ["positional", "option"])
@pytest.mark.parametrize("verb", ONE_QUEUE_VERBS, ids=lambda v: v[0] if len(v) < 2 else " ".join(v))
def test_a_one_queue_verb_takes_the_queue_either_way(
    verb: tuple[str, ...], form: str, redis_url: str, queue_name: str
) -> None:
    """`emq-worker VERB QUEUE` and `emq-worker VERB -q QUEUE` are the same command."""
    runner = CliRunner()
    url = ["--redis-url", redis_url]
    queue = [queue_name] if form == "positional" else ["-q", queue_name]
    enqueued = runner.invoke(main, ["enqueue", "-q", queue_name, "noop", *url])
    assert enqueued.exit_code == 0, enqueued.output
    if verb[0] == "obliterate":
        assert runner.invoke(main, ["pause", "-q", queue_name, *url]).exit_code == 0
    done = runner.invoke(main, [*verb, *queue, *url])
    assert done.exit_code == 0, done.output
    assert queue_name in done.output


@pytest.mark.parametrize("command", ["stats", "workers"])
def test_the_many_queue_verbs_take_queues_either_way(
    command: str, redis_url: str, queue_name: str
) -> None:
    runner = CliRunner()
    url = ["--redis-url", redis_url]
    other = f"{queue_name}-b"
    for name in (queue_name, other):
        assert runner.invoke(main, ["enqueue", "-q", name, "noop", *url]).exit_code == 0
    both = runner.invoke(main, [command, queue_name, "-q", other, "--json", *url])
    assert both.exit_code == 0, both.output
    assert queue_name in both.output
    assert other in both.output


def test_two_different_queues_named_both_ways_are_refused(redis_url: str) -> None:
    done = CliRunner().invoke(main, ["pause", "a", "-q", "b", "--redis-url", redis_url])
    assert done.exit_code == 2
    assert "two queues named: 'a' and --queue 'b'" in done.output


def test_clear_is_another_name_for_drain(redis_url: str, queue_name: str) -> None:
    """One verb per meaning: both deleted a queue's pending jobs."""
    drain, clear = main.commands["drain"], main.commands["clear"]
    assert clear.callback is drain.callback
    assert [p.name for p in clear.params] == [p.name for p in drain.params]
