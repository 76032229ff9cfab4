"""`emq-worker lanes list|pause|resume|limit`: a queue's fair lanes (jobs enqueued with a group).

Like the other admin commands, each runs on a fresh, version-fenced client; a bad group name or
limit is a usage error naming it (exit 2).
"""

from __future__ import annotations

import click
from redis.asyncio import Redis

from emq_worker.admin import render
from emq_worker.cli.operator import (
    admin_queue_option,
    admin_verb_options,
    dump_json,
    json_option,
    report,
    run_admin,
)
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.errors import ConfigError
from emq_worker.protocol import lane_verbs
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.address import RedisAddress


def _group(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return lane_verbs.validate_group(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


group_argument = click.argument("group", callback=_group)


@click.group("lanes")
def lanes_group() -> None:
    """List a queue's fair lanes, or pause, resume or limit one group's lane (jobs enqueued with
    --group / group=...)."""


@lanes_group.command("list")
@admin_queue_option
@click.option(
    "--top",
    type=click.IntRange(min=1, max=1000),
    default=lane_verbs.LANES_SHOWN,
    show_default=True,
    help="How many lanes to list, deepest first.",
)
@json_option
@redis_url_option
@wire_version_option
def lanes_list(
    queue: str, top: int, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """The deepest lanes of QUEUE: jobs waiting, leased, the group's limit, paused."""

    async def work(client: Redis, scripts: Scripts) -> lane_verbs.LanesView:
        return await lane_verbs.read_lanes(Queue(client, scripts, queue), top=top)

    view = run_admin(redis_url, wire_version, work)
    if as_json:
        dump_json({"queue": queue, **view.as_dict()})
    else:
        click.echo(render.render_lanes(queue, view))


def _lane_verb(name: str, paused: bool, help_text: str) -> click.Command:
    """`lanes pause` or `lanes resume`: set GROUP's lane paused or not, and say whether that
    changed it."""

    @group_argument
    @admin_verb_options
    def command(
        queue: str, group: str, as_json: bool, redis_url: RedisAddress, wire_version: str
    ) -> None:
        _set_lane_paused(queue, group, paused, as_json, redis_url, wire_version)

    command.__doc__ = help_text
    return lanes_group.command(name)(command)


lanes_pause = _lane_verb(
    "pause", True, "Take GROUP's lane out of rotation: its jobs wait, its running jobs run on."
)
lanes_resume = _lane_verb("resume", False, "Return GROUP's lane to rotation.")


def _set_lane_paused(
    queue: str, group: str, paused: bool, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    verb = lane_verbs.pause_lane if paused else lane_verbs.resume_lane

    async def work(client: Redis, scripts: Scripts) -> bool:
        return await verb(Queue(client, scripts, queue), group)

    changed = run_admin(redis_url, wire_version, work)
    was_paused = not changed if paused else changed
    done, already = ("paused", "was paused") if paused else ("resumed", "was not paused")
    text = f"{done} lane {group!r} of queue {queue!r}" if changed else f"lane {group!r} {already}"
    report(
        as_json, text, {"queue": queue, "group": group, "paused": paused, "was_paused": was_paused}
    )


@lanes_group.command("limit")
@admin_queue_option
@group_argument
@click.argument("limit", type=click.IntRange(min=1), required=False)
@click.option("--clear", is_flag=True, help="Lift GROUP's limit.")
@json_option
@redis_url_option
@wire_version_option
def lanes_limit(
    queue: str,
    group: str,
    limit: int | None,
    clear: bool,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
) -> None:
    """At most LIMIT jobs of GROUP leased at once, across every worker (or --clear)."""
    if (limit is not None) == clear:
        raise click.UsageError("give LIMIT or --clear")

    async def work(client: Redis, scripts: Scripts) -> None:
        await lane_verbs.limit_lane(Queue(client, scripts, queue), group, limit)

    run_admin(redis_url, wire_version, work)
    shown = "none" if limit is None else str(limit)
    report(
        as_json,
        f"lane {group!r} of queue {queue!r}: limit {shown}",
        {"queue": queue, "group": group, "limit": limit},
    )
