"""Options shared by every `emq-worker` command that talks to Redis."""

from __future__ import annotations

import click

from emq_worker.config import DEFAULT_URL
from emq_worker.protocol import DEFAULT_WIRE_VERSION

redis_url_option = click.option(
    "--redis-url",
    show_envvar=True,
    envvar="EMQ_REDIS_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="redis://, rediss:// (TLS) or unix:// URL. Put passwords here via the environment.",
)
wire_version_option = click.option(
    "--wire-version",
    show_envvar=True,
    envvar="EMQ_WIRE_VERSION",
    default=DEFAULT_WIRE_VERSION,
    show_default=True,
    help="The {emq}:version this process speaks; a mismatch refuses to start.",
)


def split_queues(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--queue a --queue b`, or EMQ_QUEUES="a,b" / "a b"."""
    return tuple(q for value in values for q in value.replace(",", " ").split())
