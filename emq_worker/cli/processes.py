"""How many processes `emq-worker run` uses: `--processes` (worker processes under one parent,
emq_worker/fleet) and `--process-pool` (the pool for `executor="process"` tasks)."""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

import click
from click.core import ParameterSource

from emq_worker.cli.options import env_option, usage_error
from emq_worker.errors import ConfigError
from emq_worker.fleet import parent
from emq_worker.fleet.orphan import PARENT_GONE, join_fleet
from emq_worker.fleet.plan import PARENT_PID_VARIABLE, PROCESS_INDEX_VARIABLE, FleetPlan
from emq_worker.observe.log import get_logger
from emq_worker.observe.sdnotify import Notifier
from emq_worker.runtime.config import WorkerSettings

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


processes_option = env_option(
    "--processes",
    "EMQ_PROCESSES",
    "1",
    callback=process_count,
    metavar="N|auto",
    help="Worker processes under one parent (auto: one per core); each is a whole worker with "
    "its own beat and leases. The parent restarts a crashed one and stops them all on SIGTERM.",
)
process_pool_option = env_option(
    "--process-pool",
    "EMQ_PROCESS_POOL",
    AUTO,
    callback=process_count,
    metavar="N|auto",
    help='Processes at most (per worker process) for tasks declared executor="process".',
)


def fleet_plan(ctx: click.Context, settings: WorkerSettings, processes: int) -> FleetPlan | None:
    """With `--processes` above 1, what the parent will start (runtime/fleet), checked before
    anything runs; None for one process. Left at its default, each child's --process-pool is its
    share of the cores."""
    if processes == 1:
        return None
    pool = None
    if ctx.get_parameter_source("process_pool") is ParameterSource.DEFAULT:
        pool = max(1, cores() // processes)
    try:
        return FleetPlan(processes, tuple(sys.argv[1:]), settings.http, settings.burst, pool)
    except ConfigError as exc:
        raise usage_error(ctx, exc) from exc


def start_fleet(plan: FleetPlan) -> NoReturn:
    """Be the parent of the plan's worker processes until they all exit."""
    with Notifier.from_environ(os.environ) as notifier:
        sys.exit(parent.run(plan, os.environ, notifier, os.getpid()))


def join_fleet_if_child() -> signal.Signals | None:
    """A child of `run --processes` (its parent set these variables): log which process it is,
    and stop with the parent (on the signal returned); exit at once when the parent is gone."""
    parent_pid = os.environ.get(PARENT_PID_VARIABLE, "")
    index = os.environ.get(PROCESS_INDEX_VARIABLE, "")
    if not (parent_pid.isdigit() and index.isdigit()):
        return None
    if not join_fleet(int(index), int(parent_pid)):
        get_logger().warning("worker_process_orphaned", parent_pid=int(parent_pid))
        sys.exit(0)
    return PARENT_GONE
