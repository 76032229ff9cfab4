"""Queue controls on the command line: `limit`, `repeat add|list|pause|resume|remove`, `events`.

Like the other admin commands, each runs on a fresh, version-fenced client; a bad value is a usage
error naming it (exit 2), an unknown repeat an error naming it (exit 1).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from typing import Any

import click
from redis.asyncio import Redis

from emq_worker.admin import render, verbs
from emq_worker.cli.operator import (
    admin_queue_option,
    admin_verb_options,
    dump_json,
    json_option,
    one_queue,
    report,
    run_admin,
    run_calls,
)
from emq_worker.cli.options import (
    json_object,
    redis_url_option,
    socket_timeout_s,
    wire_version_option,
)
from emq_worker.errors import ConfigError
from emq_worker.jobs import events as events_module
from emq_worker.jobs import repeat
from emq_worker.protocol import limits
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.connection import connect
from emq_worker.valkey.reach import explaining


def _rate(ctx: click.Context, param: click.Parameter, value: str | None) -> limits.Rate | None:
    if value is None:
        return None
    try:
        return limits.parse_rate(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def _repeat_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return repeat.validate_repeat_name(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def _show_limits(queue: str, held: limits.Limits) -> str:
    ceiling = str(held.concurrency) if held.concurrency else "none"
    rate = str(held.rate) if held.rate else "none"
    return f"queue {queue!r}: concurrency {ceiling}; rate {rate}"


@click.command("limit")
@one_queue
@click.option(
    "--concurrency",
    type=int,
    default=None,
    help="The most jobs active at once across every worker of the queue (>= 1).",
)
@click.option(
    "--rate",
    callback=_rate,
    default=None,
    help="MAX/WINDOW: at most MAX jobs started per window on the server clock, e.g. 100/1s, "
    "5/250ms, 60/1m.",
)
@click.option("--clear", is_flag=True, help="Lift both limits.")
@json_option
@redis_url_option
@wire_version_option
def limit(
    queue: str,
    concurrency: int | None,
    rate: limits.Rate | None,
    clear: bool,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
) -> None:
    """Show or set QUEUE's concurrency ceiling and rate limit, enforced by every claim."""
    if clear and (concurrency is not None or rate is not None):
        raise click.UsageError("--clear lifts both limits; give it alone")
    if concurrency is not None and concurrency < 1:
        raise click.BadParameter(
            f"must be an integer >= 1; got {concurrency}", param_hint="'--concurrency'"
        )

    async def work(client: Redis, scripts: Scripts) -> limits.Limits:
        if clear:
            await limits.clear_limits(client, queue)
        elif concurrency is not None or rate is not None:
            await limits.set_limits(client, queue, concurrency=concurrency, rate=rate)
        return await limits.read_limits(client, queue)

    held = run_admin(redis_url, wire_version, work)
    if as_json:
        dump_json({"queue": queue, **held.as_dict()})
    else:
        click.echo(_show_limits(queue, held))


@click.group("repeat")
def repeat_group() -> None:
    """Add, list, pause, resume or remove repeatable jobs (or register them with
    Producer.repeat)."""


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


@repeat_group.command("list")
@admin_verb_options
def repeat_list(queue: str, as_json: bool, redis_url: RedisAddress, wire_version: str) -> None:
    """Every repeatable job of QUEUE with its schedule and next due time (UTC)."""

    async def work(client: Redis, scripts: Scripts) -> list[repeat.RepeatInfo]:
        return await repeat.list_repeats(client, queue)

    found = run_admin(redis_url, wire_version, work)
    if as_json:
        dump_json([info.as_dict() for info in found])
        return
    if not found:
        click.echo(f"no repeatable jobs on queue {queue!r}")
        return
    rows = [
        (
            info.name,
            str(info.schedule),
            "paused" if info.paused else "active",
            "-" if info.paused else _when(info.next_due_ms),
            info.minted,
        )
        for info in found
    ]
    click.echo(render.table(("name", "schedule", "state", "next", "minted"), rows))


def _repeat_verb(verb: str, help_text: str) -> click.Command:
    @click.argument("name", callback=_repeat_name)
    @admin_verb_options
    def command(
        name: str, queue: str, as_json: bool, redis_url: RedisAddress, wire_version: str
    ) -> None:
        async def work(client: Redis, scripts: Scripts) -> tuple[str, dict[str, Any]]:
            if verb == "remove":
                if not await repeat.remove_repeat(client, queue, name):
                    raise ConfigError(f"no repeat named {name!r} on queue {queue!r}")
                text = f"removed repeat {name!r} from queue {queue!r} (jobs it minted stay)"
                return text, {"queue": queue, "name": name, "removed": True}
            change = repeat.pause_repeat if verb == "pause" else repeat.resume_repeat
            info = await change(client, queue, name)
            state = "paused" if info.paused else f"next due {_when(info.next_due_ms)}"
            return f"repeat {name!r} on queue {queue!r}: {state}", info.as_dict()

        report(as_json, *run_admin(redis_url, wire_version, work))

    command.__doc__ = help_text
    return repeat_group.command(verb)(command)


@repeat_group.command("add")
@click.argument("name", callback=_repeat_name)
@click.argument("task")
@click.argument("kwargs", default="{}", callback=json_object)
@admin_queue_option
@click.option(
    "--every-ms", type=click.IntRange(min=1), default=None, help="Mint a job every this many ms."
)
@click.option("--cron", default=None, help='A cron expression, UTC (e.g. "*/5 * * * *").')
@json_option
@redis_url_option
@wire_version_option
def repeat_add(
    name: str,
    task: str,
    kwargs: dict[str, object],
    queue: str,
    every_ms: int | None,
    cron: str | None,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
) -> None:
    """Register (or update) the repeat NAME: a TASK job with KWARGS (a JSON object) minted on
    the server clock every --every-ms or at each --cron time. The same again changes nothing."""
    try:
        schedule = repeat.Schedule(every_ms=every_ms, cron=cron)
        payload = repeat.encode_payload(task, kwargs)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc

    async def work(client: Redis, scripts: Scripts) -> repeat.RepeatInfo:
        return await repeat.register(client, queue, name, payload, schedule)

    info = run_admin(redis_url, wire_version, work)
    state = "paused" if info.paused else f"next due {_when(info.next_due_ms)}"
    report(as_json, f"repeat {name!r} on queue {queue!r}: {info.schedule}; {state}", info.as_dict())


_repeat_verb("pause", "Stop minting the repeat NAME (jobs already minted run on).")
_repeat_verb("resume", "Mint the repeat NAME again, from its next due time after now.")
_repeat_verb("remove", "Delete the repeat NAME (jobs already minted stay).")


@click.command("events")
@admin_queue_option
@click.option(
    "--count", type=click.IntRange(min=1), default=None, help="Exit after this many events."
)
@redis_url_option
@wire_version_option
def events(queue: str, count: int | None, redis_url: RedisAddress, wire_version: str) -> None:
    """Print QUEUE's lifecycle events as they happen, one JSON object per line (at-most-once:
    what happens while this is not subscribed is not shown)."""

    timeout_s = socket_timeout_s()

    async def tail() -> None:
        client = connect(redis_url, wire_version, socket_timeout_s=timeout_s)
        try:
            async with explaining(redis_url):
                await verbs.open_queue(client, Scripts(), queue)  # an unknown queue is an error
                await _print_events(client, queue, count)
        finally:
            await client.aclose()

    with contextlib.suppress(KeyboardInterrupt):
        run_calls(redis_url, tail)


async def _print_events(client: Redis, queue: str, count: int | None) -> None:
    """The subscription waits for events as long as it takes: the socket timeout bounds the
    subscribing, not the quiet between events (redis-py reads a subscription unbounded)."""
    async with events_module.open_events(client, queue) as stream:
        seen = 0
        async for event in stream:
            click.echo(json.dumps(event.data, separators=(",", ":"), ensure_ascii=False))
            seen += 1
            if count is not None and seen >= count:
                return


COMMANDS: tuple[click.Command, ...] = (limit, repeat_group, events)
