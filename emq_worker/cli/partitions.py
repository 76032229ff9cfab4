"""`emq-worker partitions QUEUE [N]`: split a logical queue into N partitions, or show them
(logic in emq_worker.admin.partitions; docs/how-to/partitions.md)."""

from __future__ import annotations

import click
from redis.asyncio import Redis

from emq_worker.admin.partitions import PartitionView, change_partitions, show_partitions
from emq_worker.admin.render import table
from emq_worker.admin.verbs import COUNT_FIELDS
from emq_worker.cli.operator import dump_json, json_option, queue_name_callback, run_admin
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.protocol.partition_names import MAX_PARTITIONS
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.address import RedisAddress


def render_partitions(view: PartitionView) -> str:
    rows = [
        [
            row.name,
            f"{row.generation}{' (current)' if row.current else ''}",
            row.slot,
            *(getattr(row.counts, name) for name in COUNT_FIELDS),
        ]
        for row in view.rows
    ]
    head = f"queue {view.queue!r}: {view.n} partition(s); workers on {view.queue!r} serve:"
    return "\n".join([head, table(["partition", "generation", "slot", *COUNT_FIELDS], rows)])


@click.command()
@click.argument("queue", callback=queue_name_callback)
@click.argument("count", metavar="[N]", required=False, type=click.IntRange(1, MAX_PARTITIONS))
@json_option
@redis_url_option
@wire_version_option
def partitions(
    queue: str, count: int | None, as_json: bool, redis_url: RedisAddress, wire_version: str
) -> None:
    """Show QUEUE's partitions, or with N split it into N partitions from now on: producers
    send new jobs over the N, workers given -q QUEUE serve them and drain the old ones."""

    async def work(client: Redis, scripts: Scripts) -> PartitionView:
        if count is None:
            return await show_partitions(client, queue)
        return await change_partitions(client, queue, count)

    view = run_admin(redis_url, wire_version, work)
    if as_json:
        dump_json(view.as_dict())
    else:
        click.echo(render_partitions(view))
