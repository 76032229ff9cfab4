"""`run`'s flags for the worker's settings, derived from their one declaration.

Each `WorkerSettings` field declared with `_flag(...)` (runtime/config.py) says its default and
help; the flag is `--` and the field's name with dashes, its environment variable `EMQ_` and the
name in capitals. Adding a setting there adds the flag, the variable and the help here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from typing import Any, TypeVar

import click

from emq_worker.errors import ConfigError
from emq_worker.retry import format_backoff, parse_backoff
from emq_worker.runtime.config import WorkerSettings

F = TypeVar("F", bound=Callable[..., Any])

DECLARED: tuple[Field[Any], ...] = tuple(f for f in fields(WorkerSettings) if "cli" in f.metadata)
"""The settings `run` takes as flags, in their declaration order."""


def settings_options(command: F) -> F:
    """Decorate `command` with one click option per declared setting."""
    for declared in reversed(DECLARED):
        command = _option(declared)(command)
    return command


def settings_from(values: dict[str, Any]) -> dict[str, Any]:
    """The declared settings out of a command's keyword arguments, as WorkerSettings takes
    them (a backoff parsed); raises ConfigError naming the setting."""
    out: dict[str, Any] = {}
    for declared in DECLARED:
        value = values.pop(declared.name)
        if declared.metadata["cli"]["kind"] == "backoff":
            try:
                value = parse_backoff(value)
            except ConfigError as exc:
                raise ConfigError(str(exc), setting=declared.name) from exc
        out[declared.name] = value
    if out.get("http") == "":
        out["http"] = None
    return out


def _option(declared: Field[Any]) -> Callable[[F], F]:
    cli: dict[str, Any] = declared.metadata["cli"]
    flag = "--" + declared.name.replace("_", "-")
    default: Any = declared.default if declared.default is not MISSING else None
    kind = cli["kind"]
    names = [flag, *([cli["short"]] if cli["short"] else [])]
    common: dict[str, Any] = {
        "show_envvar": True,
        "envvar": "EMQ_" + declared.name.upper(),
        "help": cli["help"],
    }
    if kind == "flag":
        return click.option(*names, is_flag=True, **common)
    if kind == "switch":
        return click.option(f"{flag}/--no-{flag[2:]}", default=default, show_default=True, **common)
    if cli["metavar"]:
        return click.option(*names, default=default, metavar=cli["metavar"], **common)
    if kind == "backoff":
        return click.option(*names, default=format_backoff(default), show_default=True, **common)
    value_type = click.IntRange(min=0) if kind == "at_least_0" else type(default)
    shown = cli["shown"] if cli["shown"] else True
    return click.option(*names, type=value_type, default=default, show_default=shown, **common)
