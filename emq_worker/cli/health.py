"""`emq-worker health`: probe a worker's /healthz, for container and service-manager checks."""

from __future__ import annotations

import asyncio
import sys

import click

from emq_worker.errors import ConfigError
from emq_worker.observe.http import fetch, parse_host_port


@click.command()
@click.option(
    "--http",
    "address",
    show_envvar=True,
    envvar="EMQ_HTTP",
    required=True,
    metavar="HOST:PORT",
    help="Where the worker serves /healthz (its --http).",
)
def health(address: str) -> None:
    """Exit 0 when the worker's /healthz answers 200; else print why and exit 1."""
    try:
        host, port = parse_host_port(address)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--http") from exc
    try:
        status, body = asyncio.run(fetch(host, port, "/healthz"))
    except (OSError, TimeoutError, ValueError) as exc:
        click.echo(f"unhealthy: cannot reach {address}: {exc or type(exc).__name__}", err=True)
        sys.exit(1)
    if status != 200:
        click.echo(f"unhealthy ({status}): {body.strip()}", err=True)
        sys.exit(1)
    click.echo(body.strip())
