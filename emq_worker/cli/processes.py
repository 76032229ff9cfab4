"""How many processes `emq-worker run` uses: `--processes` (worker processes under one parent,
emq_worker/fleet) and `--process-pool` (the pool for `executor="process"` tasks)."""

from __future__ import annotations

import os

import click

AUTO = "auto"


def cores() -> int:
    return os.cpu_count() or 1


def process_count(ctx: click.Context, param: click.Parameter, value: object) -> int:
    """A whole number >= 1, or `auto`: one per core."""
    text = str(value).strip().lower()
    if text == AUTO:
        return cores()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise click.BadParameter(
        f"must be a whole number >= 1 or {AUTO!r} (one per core); got {value!r}", ctx, param
    )


processes_option = click.option(
    "--processes",
    callback=process_count,
    metavar="N|auto",
    show_envvar=True,
    envvar="EMQ_PROCESSES",
    default="1",
    show_default=True,
    help="Worker processes under one parent (auto: one per core); each is a whole worker with "
    "its own beat and leases. The parent restarts a crashed one and stops them all on SIGTERM.",
)
process_pool_option = click.option(
    "--process-pool",
    callback=process_count,
    metavar="N|auto",
    show_envvar=True,
    envvar="EMQ_PROCESS_POOL",
    default=AUTO,
    show_default=True,
    help='Processes at most (per worker process) for tasks declared executor="process".',
)
