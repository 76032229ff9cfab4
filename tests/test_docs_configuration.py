"""The configuration reference cannot drift from `emq-worker run`: its table lists every flag of
the command with the environment variable click reads, and nothing the command does not take."""

from __future__ import annotations

import re
from pathlib import Path

import click

from emq_worker.cli.main import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "configuration.md"
ROW = re.compile(r"^\| (?P<flags>`--[^|]+) \| (?:`(?P<var>EMQ_\w+)`|—) \|", re.M)


def documented() -> dict[str, str]:
    """Each documented flag (every spelling in the first column) and its variable."""
    table: dict[str, str] = {}
    for row in ROW.finditer(PAGE.read_text(encoding="utf-8")):
        for flag in re.findall(r"`([^`]+)`", row["flags"]):
            for spelling in flag.split("/"):
                table[spelling] = str(row["var"])  # "None": a flag with no variable (—)
    return table


def test_every_run_flag_is_documented_with_its_variable_and_nothing_else() -> None:
    run = main.commands["run"]
    options = [p for p in run.params if isinstance(p, click.Option)]
    declared = {flag: str(o.envvar) for o in options for flag in (*o.opts, *o.secondary_opts)}
    table = documented()
    assert table, f"{PAGE} has no flag table"
    assert declared == table
