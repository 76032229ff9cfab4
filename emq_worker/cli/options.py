"""Options shared by every `emq-worker` command that talks to Redis."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from emq_worker.errors import ConfigError, EmqError
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.address import RedisAddress, redacted
from emq_worker.valkey.connection import DEFAULT_TIMEOUT_S, DEFAULT_URL
from emq_worker.valkey.credentials import with_password
from emq_worker.valkey.failures import describe, fatal


def _redis_url(ctx: click.Context, param: click.Parameter, value: str) -> RedisAddress:
    """`@PATH` reads the URL from a file (a Docker or systemd secret), so a password never has
    to appear on a command line that `ps` shows, nor in the environment. A URL without a
    password takes one from EMQ_REDIS_PASSWORD_FILE, a systemd credential or /run/secrets."""
    try:
        return RedisAddress.parse(with_password(_url_text(value), os.environ))
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc


def _url_text(value: str) -> str:
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        url = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read the Redis URL from {str(path)!r}: {exc.strerror}"
        ) from exc
    if not url:
        raise click.BadParameter(f"the Redis URL file {str(path)!r} is empty")
    return url


F = TypeVar("F", bound=Callable[..., Any])
_SOCKET_TIMEOUT = "emq_worker.socket_timeout_s"


def _keep_socket_timeout(ctx: click.Context, param: click.Parameter, value: int) -> int:
    ctx.meta[_SOCKET_TIMEOUT] = value / 1000
    return value


def socket_timeout_s() -> float:
    """The running command's --socket-timeout-ms, in seconds (kept in click's context, so the
    commands' own parameters need not carry it to where they connect)."""
    ctx = click.get_current_context(silent=True)
    value = DEFAULT_TIMEOUT_S if ctx is None else ctx.meta.get(_SOCKET_TIMEOUT, DEFAULT_TIMEOUT_S)
    return float(value)


def env_option(flag: str, envvar: str, default: Any, **more: Any) -> Callable[[F], F]:
    """An option that shows its environment variable and its default in --help (and takes
    both: the command line wins over the variable, the variable over the default)."""
    return click.option(
        flag, show_envvar=True, envvar=envvar, default=default, show_default=True, **more
    )


socket_timeout_option = env_option(
    "--socket-timeout-ms",
    "EMQ_SOCKET_TIMEOUT_MS",
    int(DEFAULT_TIMEOUT_S * 1000),
    type=click.IntRange(min=1),
    expose_value=False,
    callback=_keep_socket_timeout,
    help="How long a call may wait for the server's reply (and a connection to open, at most "
    "5 s) before the command fails naming the server.",
)
_url_option = env_option(
    "--redis-url",
    "EMQ_REDIS_URL",
    DEFAULT_URL,
    callback=_redis_url,
    help="Where Redis/Valkey is: redis://, rediss://, unix://, redis+cluster://..., or @FILE "
    "(see `emq-worker --help`).",
)


def redis_url_option(command: F) -> F:
    """--redis-url and --socket-timeout-ms: every command that talks to the server takes both."""
    return _url_option(socket_timeout_option(command))


app_dir_option = env_option(
    "--app-dir",
    "EMQ_APP_DIR",
    ".",
    type=click.Path(exists=True, file_okay=False),
    help="Directory put first on sys.path before --app is imported.",
)
wire_version_option = env_option(
    "--wire-version",
    "EMQ_WIRE_VERSION",
    DEFAULT_WIRE_VERSION,
    help="The {emq}:version this process speaks; a mismatch refuses to start.",
)

log_format_option = env_option(
    "--log-format",
    "EMQ_LOG_FORMAT",
    "auto",
    type=click.Choice(["auto", "json", "console"]),
    help="auto: console on a TTY, JSON lines otherwise.",
)
log_level_option = env_option(
    "--log-level",
    "EMQ_LOG_LEVEL",
    "info",
    type=click.Choice(["debug", "info", "warning", "error"]),
)


def json_object(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, object]:
    """A KWARGS argument: a JSON object, or a usage error (exit 2) saying what it is instead."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", ctx, param) from exc
    if not isinstance(parsed, dict):
        raise click.BadParameter(f"must be a JSON object; got {type(parsed).__name__}", ctx, param)
    return parsed


def usage_error(ctx: click.Context, exc: ConfigError) -> click.UsageError:
    """A usage error (exit 2) naming the flag and variable behind the setting at fault."""
    param = next((p for p in ctx.command.params if p.name == exc.setting), None)
    if exc.setting is None or not isinstance(param, click.Option):
        return click.UsageError(str(exc), ctx)
    return click.BadParameter(str(exc).removeprefix(f"{exc.setting} "), ctx, param)


def queue_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    """`--queue a --queue b` or `-q a,b`; EMQ_QUEUES="a,b" or "a b". A space splits only in the
    variable: on the command line `-q 'my queue'` is one (illegal) name, refused naming it,
    never served as two queues."""
    from_env = ctx.get_parameter_source(param.name or "") is ParameterSource.ENVIRONMENT
    names = (
        split_queues(values)
        if from_env
        else tuple(q for value in values for q in value.split(",") if q)
    )
    try:
        return tuple(validate_queue_name(name) for name in names)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def queue_list_option(help_text: str, **more: Any) -> Callable[[F], F]:
    """`--queue/-q`, repeatable (or a,b), checked by queue_names, read into `queues`."""
    return click.option(
        "--queue", "-q", "queues", multiple=True, callback=queue_names, help=help_text, **more
    )


def split_queues(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--queue a --queue b`, or EMQ_QUEUES="a,b" / "a b". Only commas and spaces separate: a
    newline or tab stays in the name, which is then refused naming it (never two queues)."""
    return tuple(q for value in values for q in value.replace(",", " ").split(" ") if q)


def failure_message(exc: Exception, redis_url: RedisAddress) -> str:
    """What went wrong, naming the server (never its password)."""
    if isinstance(exc, EmqError):
        cause = exc.__cause__
        return f"{exc}; {describe(cause)}" if cause is not None and fatal(cause) else str(exc)
    return f"Redis at {redacted(redis_url)}: {describe(exc)}"
