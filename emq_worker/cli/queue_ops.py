"""`emq-worker drain` and `emq-worker obliterate`: delete a queue's waiting jobs, or the whole
queue (logic in emq_worker.admin.whole_queue). `clear` is another name for `drain` (one verb per
meaning: both deleted the pending jobs, by two different paths)."""

from __future__ import annotations

import click

from emq_worker.admin import whole_queue
from emq_worker.cli.operator import json_option, on_queue, one_queue, report
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.valkey.address import RedisAddress

yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


@click.command()
@one_queue
@click.option(
    "--scheduled", is_flag=True, help="Also delete the scheduled jobs (retries and delays)."
)
@yes_option
@json_option
@redis_url_option
@wire_version_option
def drain(
    queue: str,
    scheduled: bool,
    yes: bool,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
) -> None:
    """Delete QUEUE's pending jobs (and, with --scheduled, its scheduled ones) with their keys;
    active jobs run on, dead jobs stay. `clear` is another name for it."""
    if not yes:
        what = "pending and scheduled" if scheduled else "pending"
        click.confirm(f"Delete every {what} job of queue {queue!r}?", abort=True)
    drained = on_queue(
        redis_url, wire_version, queue, lambda q: whole_queue.drain_queue(q, scheduled=scheduled)
    )
    text = f"drained {drained} job(s) from queue {queue!r}"
    report(as_json, text, {"queue": queue, "deleted": drained, "scheduled": scheduled})


clear = click.Command(
    "clear",
    callback=drain.callback,
    params=drain.params,
    help="Another name for `drain` (the same options): delete QUEUE's pending jobs.",
    short_help="Another name for drain.",
)


@click.command()
@one_queue
@click.option("--force", is_flag=True, help="Go ahead even with active jobs.")
@yes_option
@redis_url_option
@wire_version_option
def obliterate(
    queue: str, force: bool, yes: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Delete QUEUE: every job, counter and key under emq:{QUEUE}: (a live worker's presence
    excepted). QUEUE must be paused; active jobs refuse unless --force. Ends unpaused."""
    if not yes:
        click.confirm(f"Delete queue {queue!r} and all its jobs for good?", abort=True)
    done = on_queue(
        redis_url, wire_version, queue, lambda q: whole_queue.obliterate_queue(q, force=force)
    )
    click.echo(f"obliterated queue {queue!r}: {done.jobs} job(s), {done.keys} other key(s)")
    if not done.complete:
        click.echo("the key sweep stopped at its SCAN budget; run obliterate again", err=True)
