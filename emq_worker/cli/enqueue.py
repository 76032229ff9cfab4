"""`emq-worker enqueue`: one job from the shell. Given `--app`, the task and its arguments are
checked here, at enqueue time, instead of the job going dead later ("missing a required
argument")."""

from __future__ import annotations

from typing import Any

import click

from emq_worker.cli.operator import job_ids_callback, queue_name_callback, report, run_calls
from emq_worker.cli.options import (
    app_dir_option,
    json_object,
    redis_url_option,
    socket_timeout_s,
    wire_version_option,
)
from emq_worker.errors import ConfigError, EmqError, PayloadError, UnknownTaskError
from emq_worker.jobs.producer import Enqueued, Producer, check_dedup_id
from emq_worker.jobs.tasks import load_app
from emq_worker.protocol.ids import DEFAULT_NODE_ID
from emq_worker.protocol.lane_verbs import PRIORITY_MAX, PRIORITY_MIN, validate_group
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.reach import explaining


def optional_job_id(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A branded id, checked before anything connects (a usage error, exit 2)."""
    return None if value is None else job_ids_callback(ctx, param, value)


def group_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A lane's name, checked before anything connects (a usage error, exit 2)."""
    if value is None:
        return None
    try:
        return validate_group(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def dedup_id_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A dedup id, checked before anything connects (a usage error, exit 2, as --job-id's)."""
    if value is None:
        return None
    try:
        return check_dedup_id(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc).removeprefix("dedup_id "), ctx, param) from exc


def task_name_callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value:
        raise click.BadParameter("must be a task's name; got ''", ctx, param)
    return value


def check_call(app_path: str, app_dir: str, task: str, kwargs: dict[str, object]) -> None:
    """Refuse (exit 2) a task the app does not register, or kwargs its handler cannot take."""
    try:
        app = load_app(app_path, app_dir)
    except EmqError as exc:
        raise click.BadParameter(str(exc), param_hint="'--app'") from exc
    try:
        handler = app.lookup(task)
    except UnknownTaskError as exc:
        raise click.BadParameter(str(exc), param_hint="'TASK'") from exc
    try:
        handler.check_kwargs(None, kwargs)
    except PayloadError as exc:
        raise click.BadParameter(
            f"task {task!r} needs ({handler.parameters_text()}); {exc.__cause__ or exc}",
            param_hint="'KWARGS'",
        ) from exc


@click.command()
@click.option(
    "--queue",
    "-q",
    required=True,
    show_envvar=True,
    envvar="EMQ_QUEUE",
    callback=queue_name_callback,  # a usage error (exit 2), before anything connects
    help="The queue.",
)
@click.argument("task", callback=task_name_callback)
@click.argument("kwargs", default="{}", callback=json_object)
@click.option(
    "--app",
    "app_path",
    show_envvar=True,
    envvar="EMQ_APP",
    default=None,
    help="module[:attribute] of the App: check TASK and KWARGS against its handler first.",
)
@app_dir_option
@click.option("--json", "as_json", is_flag=True, help='Print {"job_id", "duplicate"} as JSON.')
@redis_url_option
@wire_version_option
@click.option(
    "--delay-ms",
    type=click.IntRange(min=0),
    default=None,
    help="Run no sooner than this from now.",
)
@click.option(
    "--job-id",
    default=None,
    callback=optional_job_id,
    help="A caller-chosen JOB id: idempotent while the job lives and for the workers' "
    "--completed-ttl-ms after it completed.",
)
@click.option(
    "--dedup-id",
    default=None,
    callback=dedup_id_callback,
    help="Enqueue only if no job holds this key (live, or completed within the workers' "
    "--completed-ttl-ms); else print that job's id (duplicate).",
)
@click.option(
    "--dedup-ttl-ms", type=click.IntRange(min=1), default=None, help="Release the key after this."
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=None,
    help="Override the task's max attempts for this job.",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=None,
    help="Override the task's timeout for this job.",
)
@click.option(
    "--result-ttl-ms",
    type=click.IntRange(min=0),
    default=None,
    help="Keep this job's return value this long (0: keep none).",
)
@click.option(
    "--group",
    default=None,
    callback=group_callback,
    help="The fair lane to wait in (e.g. a tenant): lanes are served in turn, each within its "
    "limit (emq-worker lanes limit).",
)
@click.option(
    "--priority",
    type=click.IntRange(min=PRIORITY_MIN, max=PRIORITY_MAX),
    default=0,
    show_default=True,
    help="Lower is claimed first (within its lane, or among jobs without a group).",
)
@click.option(
    "--key",
    default=None,
    help="On a partitioned queue, jobs of one key go to one partition (and keep their order).",
)
@click.option(
    "--node-id",
    type=int,
    show_envvar=True,
    envvar="EMQ_NODE_ID",
    default=DEFAULT_NODE_ID,
    show_default=True,
    help="Snowflake node id for minted job ids (0-1023).",
)
def enqueue(
    queue: str,
    task: str,
    kwargs: dict[str, object],
    app_path: str | None,
    app_dir: str,
    as_json: bool,
    redis_url: RedisAddress,
    wire_version: str,
    delay_ms: int | None,
    job_id: str | None,
    dedup_id: str | None,
    dedup_ttl_ms: int | None,
    max_attempts: int | None,
    timeout_ms: int | None,
    result_ttl_ms: int | None,
    group: str | None,
    priority: int,
    key: str | None,
    node_id: int,
) -> None:
    """Enqueue TASK with KWARGS (a JSON object) and print the job id ("<id> (duplicate)" when
    --job-id or --dedup-id names a job that exists, or that completed within the window)."""
    if app_path:
        check_call(app_path, app_dir, task, kwargs)

    timeout_s = socket_timeout_s()

    async def send() -> Enqueued:
        async with (
            explaining(redis_url),
            Producer.from_url(
                redis_url, node_id=node_id, wire_version=wire_version, socket_timeout_s=timeout_s
            ) as producer,
        ):
            return await producer.enqueue(
                queue,
                task,
                kwargs,
                delay_ms=delay_ms,
                job_id=job_id,
                dedup_id=dedup_id,
                dedup_ttl_ms=dedup_ttl_ms,
                max_attempts=max_attempts,
                timeout_ms=timeout_ms,
                result_ttl_ms=result_ttl_ms,
                group=group,
                priority=priority,
                key=key,
            )

    sent = run_calls(redis_url, send)
    text = sent.job_id + (" (duplicate)" if sent.duplicate else "")
    report(as_json, text, {"queue": queue, "job_id": sent.job_id, "duplicate": sent.duplicate})
