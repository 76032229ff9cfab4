"""`emq-worker result JOB_ID [--wait S]`: a completed job's stored return value, as JSON."""

from __future__ import annotations

import json
from typing import Any

import click

from emq_worker.cli.operator import job_ids_callback, job_queue_option, on_job_queue
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.jobs.results import wait_result
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.valkey.address import RedisAddress


@click.command()
@click.argument("job_id", callback=job_ids_callback)
@job_queue_option
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="S",
    help="Wait up to S seconds for the job to complete.",
)
@redis_url_option
@wire_version_option
def result(
    job_id: JobId, queue: str | None, wait_s: float, redis_url: RedisAddress, wire_version: str
) -> None:
    """Print JOB_ID's stored return value as JSON (its task or enqueue set result_ttl_ms).

    Exit 1 naming why when there is none: the job is dead (with its last error), still on its
    way after --wait, or completed without storing one (or it expired, or was removed)."""

    async def read(q: Queue) -> Any:
        return await wait_result(q, job_id, wait_s)

    _, value = on_job_queue(redis_url, wire_version, queue, job_id, read)
    click.echo(json.dumps(value, ensure_ascii=False))
