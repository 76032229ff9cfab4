"""What the operator's commands share: the --queue and --json options, job-id and queue-name
checks (usage errors, exit 2), and running one call on a fresh, version-fenced client (an unknown
queue or job, or a Redis error, is an error naming it: exit 1)."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.admin import lookup, verbs
from emq_worker.cli.options import (
    failure_message,
    queue_list_option,
    queue_names,
    redis_url_option,
    socket_timeout_s,
    wire_version_option,
)
from emq_worker.errors import EmqError, JobIdError, QueueNameError
from emq_worker.protocol import ids
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.connection import connect
from emq_worker.valkey.reach import explaining

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def queue_name_callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_queue_name(value)
    except QueueNameError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def job_ids_callback(ctx: click.Context, param: click.Parameter, values: Any) -> Any:
    """Check branded JOB ids (one or several) before any key is built."""
    try:
        if isinstance(values, str):
            return ids.job_id(values)
        return tuple(ids.job_id(value) for value in values)
    except JobIdError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


admin_queue_option = click.option(
    "--queue",
    "-q",
    required=True,
    show_envvar=True,
    envvar="EMQ_QUEUE",
    callback=queue_name_callback,
    help="The queue.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def optional_queue_name(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    return None if value is None else queue_name_callback(ctx, param, value)


job_queue_option = click.option(
    "--queue",
    "-q",
    default=None,
    show_envvar=True,
    envvar="EMQ_QUEUE",
    callback=optional_queue_name,
    help="The queue (default: the one queue that holds JOB_ID, found by a bounded scan).",
)


def _verb_options(queue_option: Callable[[F], F]) -> Callable[[F], F]:
    """`queue_option`, --json, --redis-url (with --socket-timeout-ms) and --wire-version: what
    every verb on a queue's jobs takes."""

    def options(command: F) -> F:
        return queue_option(json_option(redis_url_option(wire_version_option(command))))

    return options


admin_verb_options = _verb_options(admin_queue_option)
"""For a verb on a named queue (--queue required)."""
job_verb_options = _verb_options(job_queue_option)
"""For a verb on one job (--queue optional: the queue that holds it is found)."""


def on_job_queue(
    redis_url: RedisAddress,
    wire_version: str,
    queue: str | None,
    job_id: str,
    work: Callable[[Queue], Awaitable[T]],
) -> tuple[str, T]:
    """Run `work` on `queue`, or on the one queue that holds `job_id` when none is named."""

    async def on_queue(client: Redis, scripts: Scripts) -> tuple[str, T]:
        name = queue or await lookup.locate_job(client, job_id)
        return name, await work(await verbs.open_queue(client, scripts, name))

    return run_admin(redis_url, wire_version, on_queue)


def run_admin(
    redis_url: RedisAddress, wire_version: str, work: Callable[[Redis, Scripts], Awaitable[T]]
) -> T:
    """Run one admin call on a fresh (version-fenced) client, each reply waited for at most
    --socket-timeout-ms; errors exit 1 naming the value (or the server, when it did not
    answer)."""
    timeout_s = socket_timeout_s()

    async def call() -> T:
        client = connect(redis_url, wire_version, socket_timeout_s=timeout_s)
        try:
            async with explaining(redis_url):
                return await work(client, Scripts())
        finally:
            await client.aclose()

    return run_calls(redis_url, call)


def run_calls(redis_url: RedisAddress, calls: Callable[[], Awaitable[T]]) -> T:
    """`anyio.run(calls)`; an emq-worker or server error exits 1 with one line."""
    try:
        return anyio.run(calls)
    except EmqError as exc:
        raise click.ClickException(str(exc)) from exc
    except RedisError as exc:
        raise click.ClickException(failure_message(exc, redis_url)) from exc


def on_queue(
    redis_url: RedisAddress, wire_version: str, queue: str, work: Callable[[Queue], Awaitable[T]]
) -> T:
    async def on_queue(client: Redis, scripts: Scripts) -> T:
        return await work(await verbs.open_queue(client, scripts, queue))

    return run_admin(redis_url, wire_version, on_queue)


def dump_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def report(as_json: bool, text: str, facts: dict[str, Any]) -> None:
    """What a command did: `text` for a person, or `facts` as JSON (--json)."""
    if as_json:
        dump_json(facts)
    else:
        click.echo(text)


queues_option = queue_list_option(
    "Queue to look at; repeat for several. Default: every queue a bounded SCAN finds.",
    show_envvar=True,
    envvar="EMQ_QUEUES",
)


# --- one queue as QUEUE or -q QUEUE ------------------------------------------------------------
# Every command that acts on one queue takes both forms: `-q QUEUE` (preferred: run, enqueue and
# the job verbs take it too) and a positional QUEUE (pause, resume, drain, obliterate took only
# that before 0.x; the others only -q).


def queue_given(positional: str | None, option: str | None) -> str:
    """QUEUE or -q/--queue: the one named, or a usage error."""
    if positional and option and positional != option:
        raise click.UsageError(f"two queues named: {positional!r} and --queue {option!r}")
    name = positional or option
    if not name:
        raise click.UsageError("name the queue: -q QUEUE (or QUEUE)")
    return name


queue_argument = click.argument(
    "queue_arg", metavar="[QUEUE]", required=False, callback=optional_queue_name
)
queue_flag = click.option(
    "--queue",
    "-q",
    "queue_opt",
    default=None,
    show_envvar=True,
    envvar="EMQ_QUEUE",
    callback=optional_queue_name,
    help="The queue (or give it as QUEUE).",
)


def one_queue(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command` its `queue` from QUEUE or -q QUEUE (put under @click.command)."""

    @functools.wraps(command)
    def with_queue(*, queue_arg: str | None, queue_opt: str | None, **params: Any) -> None:
        command(queue=queue_given(queue_arg, queue_opt), **params)

    return queue_argument(queue_flag(with_queue))


def some_queues(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command` its `queues` from QUEUE... and -q QUEUE (repeatable), in that order."""

    @functools.wraps(command)
    def with_queues(*, queues_arg: tuple[str, ...], queues: tuple[str, ...], **params: Any) -> None:
        command(queues=tuple(dict.fromkeys((*queues_arg, *queues))), **params)

    names = click.argument("queues_arg", metavar="[QUEUE]...", nargs=-1, callback=queue_names)
    return names(queues_option(with_queues))
