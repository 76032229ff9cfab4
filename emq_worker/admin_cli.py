"""The operator's commands: stats, inspect, dead list|retry|purge, pause, resume, remove.

Each runs one call on a fresh, version-fenced client and prints a table (or JSON); an unknown queue
or job is an error naming it (exit 1), a malformed queue name or job id a usage error (exit 2).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker import admin, admin_dead, admin_render, ids
from emq_worker.cli_options import redis_url_option, split_queues, wire_version_option
from emq_worker.connection import connect
from emq_worker.errors import EmqError, JobIdError, QueueNameError
from emq_worker.keys import validate_queue_name
from emq_worker.protocol import JobId
from emq_worker.queue import Queue
from emq_worker.registry import live_workers
from emq_worker.scripts import Scripts

T = TypeVar("T")


def _queue_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_queue_name(value)
    except QueueNameError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def _job_ids(ctx: click.Context, param: click.Parameter, values: Any) -> Any:
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
    callback=_queue_name,
    help="The queue.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _admin(redis_url: str, wire_version: str, work: Callable[[Redis, Scripts], Awaitable[T]]) -> T:
    """Run one admin call on a fresh (version-fenced) client; errors exit 1 naming the value."""

    async def call() -> T:
        client = connect(redis_url, wire_version)
        try:
            return await work(client, Scripts())
        finally:
            await client.aclose()

    try:
        return anyio.run(call)
    except EmqError as exc:
        raise click.ClickException(str(exc)) from exc
    except RedisError as exc:
        raise click.ClickException(f"redis: {exc}") from exc


def _on_queue(
    redis_url: str, wire_version: str, queue: str, work: Callable[[Queue], Awaitable[T]]
) -> T:
    async def on_queue(client: Redis, scripts: Scripts) -> T:
        return await work(await admin.open_queue(client, scripts, queue))

    return _admin(redis_url, wire_version, on_queue)


def _dump(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _queue_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    return tuple(_queue_name(ctx, param, name) for name in split_queues(values))


queues_option = click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    show_envvar=True,
    envvar="EMQ_QUEUES",
    callback=_queue_names,
    help="Queue to look at; repeat for several. Default: every queue a bounded SCAN finds.",
)


@click.command()
@queues_option
@json_option
@redis_url_option
@wire_version_option
def stats(queues: tuple[str, ...], as_json: bool, redis_url: str, wire_version: str) -> None:
    """Depths (pending, active, scheduled, dead) and counters (completed, failed) per queue."""
    rows, found = _admin(
        redis_url, wire_version, lambda client, scripts: admin.stats(client, scripts, queues)
    )
    if not as_json:
        click.echo(admin_render.render_stats(rows, found))
        return
    report: dict[str, Any] = {"queues": [row.as_dict() for row in rows]}
    if found is not None:
        report["scan"] = {"complete": found.complete, "calls": found.scan_calls}
    _dump(report)


@click.command()
@click.argument("job_id", callback=_job_ids)
@admin_queue_option
@json_option
@redis_url_option
@wire_version_option
def inspect(job_id: JobId, queue: str, as_json: bool, redis_url: str, wire_version: str) -> None:
    """Show JOB_ID: its row, where it is, its lease, lock and scheduled time."""
    job = _on_queue(redis_url, wire_version, queue, lambda q: admin.inspect_job(q, job_id))
    if as_json:
        _dump(job.as_dict())
    else:
        click.echo(admin_render.render_inspection(job))


@click.group()
def dead() -> None:
    """List, retry or purge dead jobs."""


@dead.command("list")
@admin_queue_option
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
@redis_url_option
@wire_version_option
def dead_list(queue: str, limit: int, as_json: bool, redis_url: str, wire_version: str) -> None:
    """The oldest dead jobs (mint order): id, attempts, last_error."""

    async def read(q: Queue) -> tuple[int, list[admin_dead.DeadJob]]:
        return (await q.counts()).dead, await admin_dead.list_dead(q, limit)

    total, jobs = _on_queue(redis_url, wire_version, queue, read)
    if not as_json:
        click.echo(admin_render.render_dead(queue, total, jobs))
        return
    rows = [{"id": j.id, "attempts": j.attempts, "last_error": j.last_error} for j in jobs]
    _dump({"queue": queue, "total": total, "jobs": rows})


job_ids_argument = click.argument("job_ids", nargs=-1, callback=_job_ids)
all_option = click.option("--all", "every", is_flag=True, help="Every dead job of the queue.")


def _chosen(job_ids: tuple[JobId, ...], every: bool) -> tuple[JobId, ...] | None:
    if every == bool(job_ids):
        raise click.UsageError("name dead JOB_IDs or pass --all (not both)")
    return None if every else job_ids


def _report(result: admin_dead.BulkResult, verb: str, queue: str) -> None:
    click.echo(f"{verb} {result.done} dead job(s) in queue {queue!r}")
    for job_id, why in result.skipped:
        click.echo(f"skipped {job_id}: {why}", err=True)
    if result.skipped:
        sys.exit(1)


@dead.command("retry")
@job_ids_argument
@all_option
@admin_queue_option
@redis_url_option
@wire_version_option
def dead_retry(
    job_ids: tuple[JobId, ...], every: bool, queue: str, redis_url: str, wire_version: str
) -> None:
    """Return dead jobs to pending with a fresh retry budget."""
    chosen = _chosen(job_ids, every)
    result = _on_queue(redis_url, wire_version, queue, lambda q: admin_dead.retry_dead(q, chosen))
    _report(result, "retried", queue)


@dead.command("purge")
@job_ids_argument
@all_option
@admin_queue_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@redis_url_option
@wire_version_option
def dead_purge(
    job_ids: tuple[JobId, ...],
    every: bool,
    queue: str,
    yes: bool,
    redis_url: str,
    wire_version: str,
) -> None:
    """Delete dead jobs for good (rows, subkeys and dead-set members)."""
    chosen = _chosen(job_ids, every)

    async def count(q: Queue) -> int:
        return (await q.counts()).dead if chosen is None else len(chosen)

    todo = _on_queue(redis_url, wire_version, queue, count)
    if todo == 0:
        click.echo(f"no dead jobs in queue {queue!r}")
        return
    if not yes:
        click.confirm(f"Delete {todo} dead job(s) from queue {queue!r} for good?", abort=True)
    result = _on_queue(redis_url, wire_version, queue, lambda q: admin_dead.purge_dead(q, chosen))
    _report(result, "purged", queue)


def _set_paused(queue: str, paused: bool, redis_url: str, wire_version: str) -> None:
    was = _on_queue(redis_url, wire_version, queue, lambda q: admin.set_paused(q, paused))
    if was == paused:
        click.echo(f"queue {queue!r} was already {'paused' if paused else 'running'}")
    elif paused:
        click.echo(f"paused queue {queue!r}; running workers stop claiming at their next claim")
    else:
        click.echo(f"resumed queue {queue!r}")


@click.command()
@click.argument("queue", callback=_queue_name)
@redis_url_option
@wire_version_option
def pause(queue: str, redis_url: str, wire_version: str) -> None:
    """Stop workers claiming from QUEUE (the jobs they hold run on)."""
    _set_paused(queue, True, redis_url, wire_version)


@click.command()
@click.argument("queue", callback=_queue_name)
@redis_url_option
@wire_version_option
def resume(queue: str, redis_url: str, wire_version: str) -> None:
    """Let workers claim from QUEUE again."""
    _set_paused(queue, False, redis_url, wire_version)


@click.command()
@click.argument("job_id", callback=_job_ids)
@admin_queue_option
@redis_url_option
@wire_version_option
def remove(job_id: JobId, queue: str, redis_url: str, wire_version: str) -> None:
    """Delete JOB_ID (row, subkeys, set member); refused while a worker holds it."""
    _on_queue(redis_url, wire_version, queue, lambda q: admin.remove_job(q, job_id))
    click.echo(f"removed {job_id} from queue {queue!r}")


@click.command()
@click.argument("job_id", callback=_job_ids)
@admin_queue_option
@json_option
@redis_url_option
@wire_version_option
def logs(job_id: JobId, queue: str, as_json: bool, redis_url: str, wire_version: str) -> None:
    """Print JOB_ID's job log (the lines its handler appended with ctx.append_log), oldest
    first. A completed or removed job's log is gone with it; a dead job keeps its log."""
    lines = _on_queue(redis_url, wire_version, queue, lambda q: admin.job_logs(q, job_id))
    if as_json:
        _dump({"queue": queue, "job_id": job_id, "lines": lines})
    elif not lines:
        click.echo(f"no log lines for {job_id} in queue {queue!r}")
    else:
        click.echo("\n".join(admin_render.escape(line) for line in lines))


@click.command()
@queues_option
@json_option
@redis_url_option
@wire_version_option
def workers(queues: tuple[str, ...], as_json: bool, redis_url: str, wire_version: str) -> None:
    """The workers alive on each queue (they announce themselves every beat) and what they hold."""

    async def read(client: Redis, scripts: Scripts) -> dict[str, list[dict[str, object]]]:
        names = queues or (await admin.discover_queues(client)).queues
        found = {name: await live_workers(client, name) for name in names}
        for name in queues:
            if not found[name]:
                await admin.open_queue(client, scripts, name)  # an unknown queue is an error
        return found

    found = _admin(redis_url, wire_version, read)
    if as_json:
        _dump(found)
        return
    now = time.time()
    rows = [
        (
            name,
            w.get("id"),
            w.get("held"),
            w.get("concurrency"),
            w.get("completed"),
            f"{now - float(str(w.get('beat', now))):.1f} s ago",
        )
        for name, entries in found.items()
        for w in entries
    ]
    if not rows:
        click.echo("no live workers")
        return
    header = ("queue", "worker", "held", "concurrency", "completed", "last beat")
    click.echo(admin_render.table(header, rows))


@click.command()
@click.argument("job_id", callback=_job_ids)
@admin_queue_option
@redis_url_option
@wire_version_option
def cancel(job_id: JobId, queue: str, redis_url: str, wire_version: str) -> None:
    """Stop the running JOB_ID: its worker cancels it at its next renewal tick and settles it
    dead with last_error "cancelled by an operator"."""
    _on_queue(redis_url, wire_version, queue, lambda q: admin.cancel_job(q, job_id))
    click.echo(
        f"cancel requested for {job_id} in queue {queue!r}; its worker stops it within one "
        "renewal tick (a third of the lease)"
    )


COMMANDS: tuple[click.Command, ...] = (
    stats,
    inspect,
    logs,
    dead,
    pause,
    resume,
    remove,
    cancel,
    workers,
)
