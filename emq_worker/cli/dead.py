"""`emq-worker dead list|retry|purge`: the dead letter of one queue, from the shell."""

from __future__ import annotations

import sys

import click

from emq_worker.admin import dead_letter, render
from emq_worker.cli.operator import (
    admin_queue_option,
    admin_verb_options,
    dump_json,
    job_ids_callback,
    json_option,
    on_queue,
    one_queue,
)
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.valkey.address import RedisAddress


@click.group()
def dead() -> None:
    """List, retry or purge dead jobs."""


@dead.command("list")
@one_queue
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
@redis_url_option
@wire_version_option
def dead_list(
    queue: str, limit: int, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """The oldest dead jobs (mint order): id, attempts, last_error."""

    async def read(q: Queue) -> tuple[int, list[dead_letter.DeadJob]]:
        return (await q.counts()).dead, await dead_letter.list_dead(q, limit)

    total, jobs = on_queue(redis_url, wire_version, queue, read)
    if not as_json:
        click.echo(render.render_dead(queue, total, jobs))
        return
    rows = [{"id": j.id, "attempts": j.attempts, "last_error": j.last_error} for j in jobs]
    dump_json({"queue": queue, "total": total, "jobs": rows})


job_ids_argument = click.argument("job_ids", nargs=-1, callback=job_ids_callback)
all_option = click.option("--all", "every", is_flag=True, help="Every dead job of the queue.")


def _chosen(job_ids: tuple[JobId, ...], every: bool) -> tuple[JobId, ...] | None:
    if every == bool(job_ids):
        raise click.UsageError("name dead JOB_IDs or pass --all (not both)")
    return None if every else job_ids


def _report(result: dead_letter.BulkResult, verb: str, queue: str, as_json: bool) -> None:
    if as_json:
        skipped = [{"id": job_id, "why": why} for job_id, why in result.skipped]
        dump_json({"queue": queue, verb: result.done, "skipped": skipped})
    else:
        click.echo(f"{verb} {result.done} dead job(s) in queue {queue!r}")
        for job_id, why in result.skipped:
            click.echo(f"skipped {job_id}: {why}", err=True)
    if result.skipped:
        sys.exit(1)


@dead.command("retry")
@job_ids_argument
@all_option
@admin_verb_options
def dead_retry(
    job_ids: tuple[JobId, ...],
    every: bool,
    queue: str,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
) -> None:
    """Return dead jobs to pending with a fresh retry budget."""
    chosen = _chosen(job_ids, every)
    result = on_queue(redis_url, wire_version, queue, lambda q: dead_letter.retry_dead(q, chosen))
    _report(result, "retried", queue, as_json)


@dead.command("purge")
@job_ids_argument
@all_option
@admin_queue_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@redis_url_option
@wire_version_option
def dead_purge(
    job_ids: tuple[JobId, ...],
    every: bool,
    queue: str,
    yes: bool,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
) -> None:
    """Delete dead jobs for good (rows, subkeys and dead-set members)."""
    chosen = _chosen(job_ids, every)

    async def count(q: Queue) -> int:
        return (await q.counts()).dead if chosen is None else len(chosen)

    todo = on_queue(redis_url, wire_version, queue, count)
    if todo == 0:
        if as_json:
            _report(dead_letter.BulkResult(), "purged", queue, as_json)
        else:
            click.echo(f"no dead jobs in queue {queue!r}")
        return
    if not yes:
        click.confirm(f"Delete {todo} dead job(s) from queue {queue!r} for good?", abort=True)
    result = on_queue(redis_url, wire_version, queue, lambda q: dead_letter.purge_dead(q, chosen))
    _report(result, "purged", queue, as_json)
