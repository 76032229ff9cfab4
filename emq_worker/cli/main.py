"""The `emq-worker` command. The only place that reads the environment (EMQ_* variables)."""

from __future__ import annotations

import sys
from typing import Any

import click
from redis.exceptions import RedisError

from emq_worker.beat import daemon
from emq_worker.beat.config import WorkerSettings
from emq_worker.cli import admin, control
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
    queue_names,
    redis_url_option,
    usage_error,
    wire_version_option,
)
from emq_worker.cli.processes import (
    fleet_plan,
    join_fleet_if_child,
    process_pool_option,
    processes_option,
    start_fleet,
)
from emq_worker.errors import ConfigError, EmqError
from emq_worker.jobs.tasks import load_app, with_raw_tasks
from emq_worker.observe import log
from emq_worker.retry import format_backoff, parse_backoff
from emq_worker.server.failures import exit_code_for

DEFAULTS = WorkerSettings(queues=("default",))


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
    """


@main.command()
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    required=True,
    show_envvar=True,
    envvar="EMQ_QUEUES",
    callback=queue_names,
    help="Queue to serve; repeat for several (or a,b), served in the order given.",
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
@click.option(
    "--concurrency",
    "-c",
    type=int,
    show_envvar=True,
    envvar="EMQ_CONCURRENCY",
    default=DEFAULTS.concurrency,
    show_default=True,
    help="Jobs run at once.",
)
@click.option(
    "--lease-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_LEASE_MS",
    default=DEFAULTS.lease_ms,
    show_default=True,
    help="How long a claim holds a job without a renewal.",
)
@click.option(
    "--beat-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_BEAT_MS",
    default=DEFAULTS.beat_ms,
    show_default=True,
    help="The longest park; each queue is checked (reaped) at least once per beat x queues / 10.",
)
@click.option(
    "--renew-every-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_RENEW_EVERY_MS",
    default=0,
    show_default="a third of --lease-ms",
    help="Renewal sweep cadence (0: the default).",
)
@click.option(
    "--stop-margin-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_STOP_MARGIN_MS",
    default=0,
    show_default="max(100, 5% of --lease-ms), at most half the renewal cadence",
    help="How long before the server may reap an unconfirmed lease its handler is cancelled "
    "(0: the default).",
)
@click.option(
    "--grace-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_GRACE_MS",
    default=DEFAULTS.grace_ms,
    show_default=True,
    help="On SIGTERM, how long running jobs may finish.",
)
@click.option(
    "--max-attempts",
    type=int,
    show_envvar=True,
    envvar="EMQ_MAX_ATTEMPTS",
    default=DEFAULTS.max_attempts,
    show_default=True,
    help="Default attempts before a job goes to dead (tasks may override).",
)
@click.option(
    "--backoff",
    show_envvar=True,
    envvar="EMQ_BACKOFF",
    default=format_backoff(DEFAULTS.backoff),
    show_default=True,
    help="Default retry delay: fixed:MS, exponential:BASE_MS:CAP_MS, jitter:...",
)
@click.option(
    "--job-timeout-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_JOB_TIMEOUT_MS",
    default=DEFAULTS.job_timeout_ms,
    show_default=True,
    help="Default handler timeout (tasks may override).",
)
@click.option(
    "--completed-ttl-ms",
    type=click.IntRange(min=0),
    show_envvar=True,
    envvar="EMQ_COMPLETED_TTL_MS",
    default=DEFAULTS.completed_ttl_ms,
    show_default=True,
    help="How long a completed job enqueued with --job-id or a dedup id stays a duplicate "
    "(its tombstone key; 0: only while the job lives).",
)
@wire_version_option
@log_format_option
@log_level_option
@click.option(
    "--burst",
    is_flag=True,
    show_envvar=True,
    envvar="EMQ_BURST",
    help="Exit once nothing is held, pending or scheduled.",
)
@click.option(
    "--handoff/--no-handoff",
    show_envvar=True,
    envvar="EMQ_HANDOFF",
    default=DEFAULTS.handoff,
    show_default=True,
    help="While parked with a free slot, take the next job enqueued straight from the enqueue "
    "script, without a claim round trip.",
)
@click.option(
    "--http",
    show_envvar=True,
    envvar="EMQ_HTTP",
    default=None,
    metavar="HOST:PORT",
    help="Serve /metrics, /healthz and /readyz here, e.g. 127.0.0.1:9464 (default: off).",
)
@click.option(
    "--connect-wait-ms",
    type=int,
    show_envvar=True,
    envvar="EMQ_CONNECT_WAIT_MS",
    default=DEFAULTS.connect_wait_ms,
    show_default=True,
    help="At start, retry a dropped, refused or timed-out connection this long before exiting 1.",
)
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
    redis_url: str,
    concurrency: int,
    lease_ms: int,
    beat_ms: int,
    renew_every_ms: int,
    stop_margin_ms: int,
    grace_ms: int,
    max_attempts: int,
    backoff: str,
    job_timeout_ms: int,
    completed_ttl_ms: int,
    wire_version: str,
    log_format: Any,
    log_level: str,
    burst: bool,
    handoff: bool,
    http: str | None,
    connect_wait_ms: int,
    processes: int,
    process_pool: int,
    check: bool,
) -> None:
    """Run the worker daemon on one or more queues."""
    ctx = click.get_current_context()
    try:
        policy = parse_backoff(backoff)
    except ConfigError as exc:
        raise usage_error(ctx, ConfigError(str(exc), setting="backoff")) from exc
    try:
        settings = WorkerSettings(
            queues=queues,
            redis_url=redis_url,
            concurrency=concurrency,
            lease_ms=lease_ms,
            beat_ms=beat_ms,
            renew_every_ms=renew_every_ms,
            stop_margin_ms=stop_margin_ms,
            grace_ms=grace_ms,
            max_attempts=max_attempts,
            backoff=policy,
            job_timeout_ms=job_timeout_ms,
            completed_ttl_ms=completed_ttl_ms,
            wire_version=wire_version,
            burst=burst,
            handoff=handoff,
            http=http or None,
            connect_wait_ms=connect_wait_ms,
            process_pool=process_pool,
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
        message = failure_message(exc, settings.redis_url)
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


# --- admin: the verbs operators reach for (logic in emq_worker.admin.verbs) ----------------------


for _command in admin.COMMANDS:
    main.add_command(_command)
for _command in control.COMMANDS:
    main.add_command(_command)
