"""`emq-worker quiet|stop WORKER_ID`: ask one live worker (an id `emq-worker workers` lists) to
claim nothing new, or to hand back what it holds and exit 0. Its beat reads the request."""

from __future__ import annotations

import click
from redis.asyncio import Redis

from emq_worker.admin import verbs, worker_control
from emq_worker.cli.operator import json_option, report, run_admin
from emq_worker.cli.options import redis_url_option, wire_version_option
from emq_worker.protocol import control
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.address import RedisAddress

DONE = {
    control.QUIET: "claims nothing new from its next beat on and finishes the jobs it holds",
    control.STOP: "hands back the jobs it holds at its next beat and exits 0",
}


def _ask_command(asked: str, summary: str) -> click.Command:
    @click.command(asked, help=summary)
    @click.argument("worker_id")
    @json_option
    @redis_url_option
    @wire_version_option
    def ask(worker_id: str, as_json: bool, redis_url: RedisAddress, wire_version: str) -> None:
        async def write(client: Redis, scripts: Scripts) -> str:
            async def queues() -> tuple[str, ...]:
                return (await verbs.discover_queues(client)).queues

            return await worker_control.ask_worker(client, worker_id, asked, queues)

        key = run_admin(redis_url, wire_version, write)
        text = f"asked worker {worker_id} to {asked} ({key}): it {DONE[asked]}"
        report(as_json, text, {"worker": worker_id, "asked": asked, "key": key})

    return ask


quiet = _ask_command(
    control.QUIET,
    "Quiet the live worker WORKER_ID: from its next beat it claims nothing new and finishes "
    "the jobs it holds, then idles (still alive) until stopped.",
)
stop = _ask_command(
    control.STOP,
    "Stop the live worker WORKER_ID: at its next beat it hands the jobs it holds back to "
    "pending (they run elsewhere) and exits 0.",
)

COMMANDS: tuple[click.Command, ...] = (quiet, stop)
