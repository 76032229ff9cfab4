"""`emq-worker dashboard`: serve the web dashboard with uvicorn.

Imports neither Starlette nor uvicorn until the command runs, so `emq-worker run` never loads
them, and a missing `dashboard` extra is reported (exit 2) rather than a traceback.
"""

from __future__ import annotations

import sys

import anyio
import click
from redis.exceptions import RedisError

from emq_worker.cli.install import pip_line
from emq_worker.cli.options import (
    failure_message,
    redis_url_option,
    socket_timeout_s,
    wire_version_option,
)
from emq_worker.dashboard.settings import (
    DEFAULT_BIND,
    TOKEN_VARIABLE,
    DashboardSettings,
    parse_bind,
)
from emq_worker.errors import ConfigError, EmqError
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.connection import connect
from emq_worker.valkey.failures import exit_code_for
from emq_worker.valkey.reach import explaining

EXIT_UNREACHABLE = 1
EXIT_USAGE = 2


def reach_or_exit(settings: DashboardSettings, url: RedisAddress) -> None:
    """PING the server at `url` (the settings' URL, parsed) before serving: one line and exit 1
    (3, 4: credentials, ACL) when it cannot be reached, rather than uvicorn's traceback and
    "Application startup failed"."""

    async def ping() -> None:
        client = connect(url, settings.wire_version, socket_timeout_s=settings.socket_timeout_s)
        try:
            async with explaining(url):
                await client.ping()
        finally:
            await client.aclose()

    try:
        anyio.run(ping)
    except (EmqError, RedisError) as exc:
        click.echo(f"Error: {failure_message(exc, url)}", err=True)
        sys.exit(exit_code_for(exc) or EXIT_UNREACHABLE)


def missing_extra() -> str | None:
    """The first module of the `dashboard` extra that cannot be imported, if any."""
    for module in ("starlette", "uvicorn", "jinja2"):
        try:
            __import__(module)
        except ImportError:
            return module
    return None


@click.command()
@redis_url_option
@wire_version_option
@click.option(
    "--bind",
    show_envvar=True,
    envvar="EMQ_DASHBOARD_BIND",
    default=DEFAULT_BIND,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to listen. Beyond loopback, --allow-actions needs EMQ_DASHBOARD_TOKEN.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    show_envvar=True,
    envvar="EMQ_DASHBOARD_ALLOW_ACTIONS",
    help="Offer retry, purge, pause/resume and cancel (read-only without it).",
)
@click.option(
    "--token",
    show_envvar=True,
    envvar=TOKEN_VARIABLE,
    default=None,
    help="Token every page asks for (16+ characters). Set the variable, not this flag: a "
    "command line is visible to `ps`.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def dashboard(
    redis_url: RedisAddress,
    wire_version: str,
    bind: str,
    allow_actions: bool,
    token: str | None,
    log_level: str,
) -> None:
    """Serve the web dashboard: queues, lease timelines, jobs, dead letter."""
    missing = missing_extra()
    if missing is not None:
        click.echo(f"Error: the dashboard needs {missing}: {pip_line('dashboard')}", err=True)
        sys.exit(EXIT_USAGE)
    try:
        settings = DashboardSettings(
            redis_url=redis_url.url,
            bind=parse_bind(bind),
            wire_version=wire_version,
            allow_actions=allow_actions,
            token=token or None,
            socket_timeout_s=socket_timeout_s(),
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    reach_or_exit(settings, redis_url)

    import uvicorn

    from emq_worker.dashboard.app import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=settings.bind.host,
        port=settings.bind.port,
        log_level=log_level,
        lifespan="on",
        server_header=False,
    )
    uvicorn.Server(config).run()
