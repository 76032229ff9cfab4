"""`emq-worker dev`: a whole development setup in one command, with nothing installed but pip: a
server (valkey-server or redis-server on PATH, else the embedded Valkey), a worker for --app,
the dashboard, and (--reload) a worker restart on every change to the app (see cli/devloop.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import click

from emq_worker.cli import devloop
from emq_worker.cli.dashboard import missing_extra
from emq_worker.cli.install import pip_line
from emq_worker.cli.options import queue_list_option
from emq_worker.errors import EmqError
from emq_worker.jobs.tasks import load_app
from emq_worker.valkey.binary import ServerBinaryError, find_server
from emq_worker.valkey.local import ServerStartError


def _plan(asked: devloop.DevPlan, reload: bool) -> devloop.DevPlan:
    """The checked plan, or a usage error naming the bad value. The app is imported here, before
    any process starts: a bad --app is one error, not a server and a dashboard started first."""
    if reload and importlib.util.find_spec("watchfiles") is None:
        raise click.UsageError(f"--reload needs watchfiles: {pip_line('dev')}")
    watch = tuple(devloop.app_paths(asked.app, asked.app_dir)) if reload else ()
    load_app(asked.app, asked.app_dir)
    missing = missing_extra()
    if missing is not None:
        click.echo(
            f"emq-worker dev: going on without the dashboard: it needs {missing} "
            f"({pip_line('dashboard')})"
        )
    return dataclasses.replace(asked, watch=watch, dashboard=missing is None)


def _data_directory(ctx: click.Context, param: click.Parameter, value: Path | None) -> Any:
    """--persist DIR, made if missing; one that cannot be made is a usage error naming it."""
    if value is not None:
        try:
            value.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot make the data directory {str(value)!r}: {exc.strerror or exc}", ctx, param
            ) from exc
    return value


@click.command()
@click.option("--app", required=True, help="module:attribute of the emq_worker.App to run.")
@click.option(
    "--app-dir",
    default=".",
    show_default=True,
    type=click.Path(exists=True, file_okay=False),
    help="Directory put first on sys.path before --app is imported.",
)
@queue_list_option("Queue to serve; repeat for several (or a,b).", required=True)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The server's port on 127.0.0.1 (default: a free one).",
)
@click.option(
    "--persist",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    callback=_data_directory,
    metavar="DIR",
    help="Keep the server's data (AOF) in DIR across runs (default: a temp dir removed on exit).",
)
@click.option("--reload", is_flag=True, help="Restart the worker when the app's .py files change.")
@click.option(
    "--server",
    default=None,
    metavar="PATH",
    help="The server binary: a path, or `valkey` / `redis` (default: valkey-server or "
    "redis-server on PATH, else the embedded Valkey).",
)
def dev(
    app: str,
    app_dir: str,
    queues: tuple[str, ...],
    port: int | None,
    persist: Path | None,
    reload: bool,
    server: str | None,
) -> None:
    """Run a server, a worker for --app and the dashboard for development; Ctrl-C stops all."""
    try:
        plan = _plan(devloop.DevPlan(app, app_dir, queues, port, persist), reload)
    except EmqError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        binary = find_server(server)
        code = devloop.serve(plan, binary, click.echo)
    except (ServerBinaryError, ServerStartError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)
