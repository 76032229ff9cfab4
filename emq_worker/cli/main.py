"""The `emq-worker` command. The only place that reads the environment (EMQ_* variables)."""

from __future__ import annotations

import sys
from typing import Any

import click
from redis.exceptions import RedisError

from emq_worker.cli import admin, control, worker_control
from emq_worker.cli.check import run_check
from emq_worker.cli.dashboard import dashboard as dashboard_command
from emq_worker.cli.demo.command import demo as demo_command
from emq_worker.cli.dev import dev as dev_command
from emq_worker.cli.enqueue import enqueue as enqueue_command
from emq_worker.cli.health import health as health_command
from emq_worker.cli.lanes import lanes_group
from emq_worker.cli.options import (
    app_dir_option,
    failure_message,
    log_format_option,
    log_level_option,
    queue_list_option,
    redis_url_option,
    socket_timeout_s,
    usage_error,
    wire_version_option,
)
from emq_worker.cli.partitions import partitions as partitions_command
from emq_worker.cli.processes import (
    fleet_plan,
    join_fleet_if_child,
    process_pool_option,
    processes_option,
    start_fleet,
)
from emq_worker.cli.settings_options import settings_from, settings_options
from emq_worker.errors import ConfigError, EmqError
from emq_worker.jobs.tasks import load_app, with_raw_tasks
from emq_worker.observe import log
from emq_worker.runtime import daemon
from emq_worker.runtime.config import WorkerSettings
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.failures import exit_code_for


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="emq-worker")
def main() -> None:
    """emq-worker: an asyncio worker for EchoMQ queues on Valkey/Redis.

    \b
    Every command that talks to Redis takes --redis-url (EMQ_REDIS_URL):
      redis://[user:pass@]host:port/db, rediss:// (TLS) or unix:///path?db=N;
      redis+cluster://HOST:PORT,HOST:PORT,... (rediss+cluster:// for TLS) for a
      Redis/Valkey Cluster given by seed nodes; or @PATH to read the URL from a
      file (a Docker or systemd secret). A URL without a password takes one from
      EMQ_REDIS_PASSWORD_FILE, $CREDENTIALS_DIRECTORY/redis-password or
      /run/secrets/redis-password. Keep passwords off the command line.
    And --socket-timeout-ms (EMQ_SOCKET_TIMEOUT_MS, 5000): a server that does
    not answer in that time is an error naming it, never a hang.
    """


@main.command()
@queue_list_option(
    "Queue to serve; repeat for several (or a,b), served in the order given.",
    required=True,
    show_envvar=True,
    envvar="EMQ_QUEUES",
)
@click.option(
    "--app",
    "app_path",
    show_envvar=True,
    envvar="EMQ_APP",
    required=True,
    help="module[:attribute] of the emq_worker.App with the handlers (attribute: app).",
)
@app_dir_option
@click.option(
    "--raw-task",
    "raw_tasks",
    multiple=True,
    show_envvar=True,
    envvar="EMQ_RAW_TASKS",
    metavar="QUEUE=MODULE:FUNCTION",
    help="Run every job of QUEUE with this handler fn(ctx), which reads ctx.payload as raw bytes "
    "(jobs of EchoMQ's or other clients); repeat for several queues.",
)
@redis_url_option
@settings_options
@wire_version_option
@log_format_option
@log_level_option
@processes_option
@process_pool_option
@click.option(
    "--check",
    is_flag=True,
    help="Import the app and list its tasks, ping the server, check the version fence; "
    "exit 0 or 1 without serving.",
)
def run(
    queues: tuple[str, ...],
    app_path: str,
    app_dir: str,
    raw_tasks: tuple[str, ...],
    redis_url: RedisAddress,
    wire_version: str,
    log_format: Any,
    log_level: str,
    processes: int,
    process_pool: int,
    check: bool,
    **declared: Any,
) -> None:
    """Run the worker daemon on one or more queues."""
    ctx = click.get_current_context()
    try:
        settings = WorkerSettings(
            queues=queues,
            redis_url=redis_url.url,
            wire_version=wire_version,
            process_pool=process_pool,
            check_timeout_ms=round(socket_timeout_s() * 1000),
            **settings_from(declared),
        )
        app = with_raw_tasks(load_app(app_path, app_dir), raw_tasks, settings.queues)
    except ConfigError as exc:
        raise usage_error(ctx, exc) from exc
    plan = fleet_plan(ctx, settings, processes)
    if check:
        sys.exit(run_check(settings, app))
    log.configure(log_format, log_level)
    if plan is not None:
        start_fleet(plan)
    parent_gone = join_fleet_if_child()
    try:
        code = daemon.run(settings, app, parent_gone)
    except (EmqError, RedisError) as exc:
        message = failure_message(exc, settings.address)
        log.get_logger().error("worker_failed", error=message)
        click.echo(f"Error: {message}", err=True)
        sys.exit(exit_code_for(exc) or daemon.EXIT_FATAL)
    sys.exit(code)


main.add_command(enqueue_command)
main.add_command(health_command)
main.add_command(demo_command)
main.add_command(dev_command)
main.add_command(dashboard_command)  # imports Starlette only when it runs
main.add_command(lanes_group)
main.add_command(partitions_command)


# --- admin: the verbs operators reach for (logic in emq_worker.admin.verbs) ----------------------


for _command in admin.COMMANDS:
    main.add_command(_command)
for _command in control.COMMANDS:
    main.add_command(_command)
for _command in worker_control.COMMANDS:
    main.add_command(_command)
