"""`emq-worker drain` and `emq-worker obliterate`: delete a queue's waiting jobs, or the whole
queue (logic in emq_worker.admin.queue_ops)."""

from __future__ import annotations

import click

from emq_worker.admin import queue_ops
from emq_worker.cli.operator import on_queue, queue_name_callback
from emq_worker.cli.options import redis_url_option, wire_version_option

yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


@click.command()
@click.argument("queue", callback=queue_name_callback)
@click.option(
    "--scheduled", is_flag=True, help="Also delete the scheduled jobs (retries and delays)."
)
@yes_option
@redis_url_option
@wire_version_option
def drain(queue: str, scheduled: bool, yes: bool, redis_url: str, wire_version: str) -> None:
    """Delete QUEUE's pending jobs (and, with --scheduled, its scheduled ones) with their keys;
    active jobs run on, dead jobs stay."""
    if not yes:
        what = "pending and scheduled" if scheduled else "pending"
        click.confirm(f"Delete every {what} job of queue {queue!r}?", abort=True)
    drained = on_queue(
        redis_url, wire_version, queue, lambda q: queue_ops.drain_queue(q, scheduled=scheduled)
    )
    click.echo(f"drained {drained} job(s) from queue {queue!r}")


@click.command()
@click.argument("queue", callback=queue_name_callback)
@click.option("--force", is_flag=True, help="Go ahead even with active jobs.")
@yes_option
@redis_url_option
@wire_version_option
def obliterate(queue: str, force: bool, yes: bool, redis_url: str, wire_version: str) -> None:
    """Delete QUEUE: every job, counter and key under emq:{QUEUE}: (a live worker's presence
    excepted). QUEUE must be paused; active jobs refuse unless --force. Ends unpaused."""
    if not yes:
        click.confirm(f"Delete queue {queue!r} and all its jobs for good?", abort=True)
    done = on_queue(
        redis_url, wire_version, queue, lambda q: queue_ops.obliterate_queue(q, force=force)
    )
    click.echo(f"obliterated queue {queue!r}: {done.jobs} job(s), {done.keys} other key(s)")
    if not done.complete:
        click.echo("the key sweep stopped at its SCAN budget; run obliterate again", err=True)
