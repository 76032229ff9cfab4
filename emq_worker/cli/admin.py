"""The operator's commands: stats, inspect, logs, pause, resume, remove, cancel, workers (the
dead letter's are in dead_cli).

Each runs one call on a fresh, version-fenced client and prints a table (or JSON); an unknown queue
or job is an error naming it (exit 1), a malformed queue name or job id a usage error (exit 2).
"""

from __future__ import annotations

import time
from typing import Any

import click
from redis.asyncio import Redis

from emq_worker.admin import lookup, render, verbs
from emq_worker.cli.dead import dead
from emq_worker.cli.operator import (
    admin_verb_options,
    dump_json,
    job_ids_callback,
    job_verb_options,
    json_option,
    on_job_queue,
    on_queue,
    one_queue,
    report,
    run_admin,
    some_queues,
)
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.cli.queue_ops import clear, drain, obliterate
from emq_worker.cli.results import result
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.presence import live_workers
from emq_worker.valkey.address import RedisAddress


@click.command()
@some_queues
@json_option
@redis_url_option
@wire_version_option
def stats(
    queues: tuple[str, ...], as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Depths (pending, active, scheduled, dead) and counters (completed, dead_lettered) per
    queue; the JSON also gives dead_lettered as `failed`, its old name."""
    rows, found = run_admin(
        redis_url, wire_version, lambda client, scripts: verbs.stats(client, scripts, queues)
    )
    if not as_json:
        click.echo(render.render_stats(rows, found))
        return
    report: dict[str, Any] = {"queues": [row.as_dict() for row in rows]}
    if found is not None:
        report["scan"] = {"complete": found.complete, "calls": found.scan_calls}
    dump_json(report)


@click.command()
@click.argument("job_id", callback=job_ids_callback)
@job_verb_options
def inspect(
    job_id: JobId, queue: str | None, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Show JOB_ID: its row, where it is, its lease, lock and scheduled time, and for a failed
    job its recent errors and traceback; for a completed job, its stored result."""

    async def read(q: Queue) -> verbs.Inspection | lookup.CompletedJob:
        try:
            return await verbs.inspect_job(q, job_id)
        except verbs.UnknownJobError:
            completed = await lookup.completed_job(q, job_id)
            if completed is None:
                raise
            return completed

    _, job = on_job_queue(redis_url, wire_version, queue, job_id, read)
    if as_json:
        dump_json(job.as_dict())
    elif isinstance(job, lookup.CompletedJob):
        click.echo(render.render_completed(job))
    else:
        click.echo(render.render_inspection(job))


def _set_paused(
    queue: str, paused: bool, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    # Not on_queue: a queue with no keys yet may be paused before its first job.
    was, count = run_admin(
        redis_url,
        wire_version,
        lambda client, scripts: verbs.set_paused_by_name(client, scripts, queue, paused),
    )
    parts = f" ({count} queues served under that name)" if count > 1 else ""
    if was == paused:
        text = f"queue {queue!r}{parts} was already {'paused' if paused else 'running'}"
    elif paused:
        text = f"paused queue {queue!r}{parts}; running workers stop claiming at their next claim"
    else:
        text = f"resumed queue {queue!r}{parts}"
    report(as_json, text, {"queue": queue, "paused": paused, "was_paused": was})


@click.command()
@one_queue
@json_option
@redis_url_option
@wire_version_option
def pause(queue: str, as_json: bool, redis_url: RedisAddress, wire_version: str) -> None:
    """Stop workers claiming from QUEUE (the jobs they hold run on). A queue with no keys yet
    can be paused: its first jobs then wait."""
    _set_paused(queue, True, as_json, redis_url, wire_version)


@click.command()
@one_queue
@json_option
@redis_url_option
@wire_version_option
def resume(queue: str, as_json: bool, redis_url: RedisAddress, wire_version: str) -> None:
    """Let workers claim from QUEUE again."""
    _set_paused(queue, False, as_json, redis_url, wire_version)


@click.command()
@click.argument("job_id", callback=job_ids_callback)
@admin_verb_options
def remove(
    job_id: JobId, queue: str, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Delete JOB_ID (row, subkeys, set member); refused while a worker holds it."""
    on_queue(redis_url, wire_version, queue, lambda q: verbs.remove_job(q, job_id))
    text = f"removed {job_id} from queue {queue!r}"
    report(as_json, text, {"queue": queue, "job_id": job_id, "removed": True})


@click.command()
@click.argument("job_id", callback=job_ids_callback)
@job_verb_options
def logs(
    job_id: JobId, queue: str | None, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Print JOB_ID's job log (the lines its handler appended with ctx.append_log), oldest
    first. A completed or removed job's log is gone with it; a dead job keeps its log."""
    name, lines = on_job_queue(
        redis_url, wire_version, queue, job_id, lambda q: verbs.job_logs(q, job_id)
    )
    if as_json:
        dump_json({"queue": name, "job_id": job_id, "lines": lines})
    elif not lines:
        click.echo(f"no log lines for {job_id} in queue {name!r}")
    else:
        click.echo("\n".join(render.escape(line) for line in lines))


@click.command()
@some_queues
@json_option
@redis_url_option
@wire_version_option
def workers(
    queues: tuple[str, ...], as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """The workers alive on each queue (they announce themselves every beat) and what they hold."""

    async def read(client: Redis, scripts: Scripts) -> dict[str, list[dict[str, object]]]:
        names = queues or (await verbs.discover_queues(client)).queues
        found = {name: await live_workers(client, name) for name in names}
        for name in queues:
            if not found[name]:
                await verbs.open_queue(client, scripts, name)  # an unknown queue is an error
        return found

    found = run_admin(redis_url, wire_version, read)
    if as_json:
        dump_json(found)
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
    click.echo(render.table(header, rows))


@click.command()
@click.argument("job_id", callback=job_ids_callback)
@admin_verb_options
def cancel(
    job_id: JobId, queue: str, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Stop the running JOB_ID: its worker cancels it at its next renewal tick and settles it
    dead with last_error "cancelled by an operator"."""
    on_queue(redis_url, wire_version, queue, lambda q: verbs.cancel_job(q, job_id))
    text = (
        f"cancel requested for {job_id} in queue {queue!r}; its worker stops it within one "
        "renewal tick (a third of the lease)"
    )
    report(as_json, text, {"queue": queue, "job_id": job_id, "cancel_requested": True})


COMMANDS: tuple[click.Command, ...] = (
    stats,
    inspect,
    result,
    logs,
    dead,
    clear,
    pause,
    resume,
    remove,
    cancel,
    workers,
    drain,
    obliterate,
)
