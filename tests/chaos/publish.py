"""The guarantees table of docs/explanation/guarantees.md, from one full chaos run's JSON.

`python -m tests.chaos --publish` runs every row at the full sizes, writes
docs/benchmarks/<date>-guarantees.json (commit, date, machine, server, minutes, the records) and
rewrites the table between the page's `guarantees` markers from it; `--publish --from JSON`
rewrites the table only. tests/test_published_figures.py fails when the page and the latest
JSON disagree.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from bench import publish as markers

REPO = Path(__file__).resolve().parent.parent.parent
PUBLISHED = REPO / "docs" / "benchmarks"
PAGE = REPO / "docs" / "explanation" / "guarantees.md"
BEGIN, END = (
    "<!-- guarantees:begin (python -m tests.chaos --publish) -->",
    "<!-- guarantees:end -->",
)
COLUMNS = (
    "row",
    "faults",
    "jobs",
    "lost",
    "duplicated",
    "stale",
    "dead",
    "extra_runs",
    "max_recovery_s",
    "p99_recovery_s",
    "bound_s",
)


def latest() -> Path:
    found = sorted(PUBLISHED.glob("*-guarantees.json"))
    if not found:
        raise FileNotFoundError(f"no *-guarantees.json under {PUBLISHED}")
    return found[-1]


def block(published: dict[str, Any]) -> str:
    """The page's block: where the figures come from, then the table."""
    minutes = published["seconds"] / 60
    lines = [
        f"The figures below are from a full run at commit {published['commit']}, on "
        f"{published['date'][:10]} ({minutes:.1f} minutes on this {published['nproc']}-core "
        f"machine, {published['server']}).",
        "",
        "| " + " | ".join(name.replace("_", " ") for name in COLUMNS) + " |",
        "|-----|" + "|".join("-" * (len(name) + 1) + ":" for name in COLUMNS[1:]) + "|",
    ]
    for record in published["records"]:
        cells = ["-" if record.get(name) is None else str(record[name]) for name in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rewritten(text: str, new_block: str) -> str:
    return markers.rewritten(text, new_block, BEGIN, END)


def block_of(text: str) -> str:
    return markers.block_of(text, BEGIN, END)


def server_named(binary: str) -> str:
    """`redis-server 7.0.15`: the binary's name and the version it reports."""
    said = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"v=(\S+)", said)
    return f"{Path(binary).name} {found.group(1) if found else '?'}"


def compose(records: list[dict[str, Any]], seconds: float, server: str) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return {
        "commit": commit,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "machine": {"kernel": platform.release(), "python": platform.python_version()},
        "server": server,
        "seconds": round(seconds, 1),
        "records": records,
    }


def publish(published: dict[str, Any]) -> Path:
    """Write the JSON (when it is a new run's) and the page's table."""
    path = PUBLISHED / f"{published['date'][:10]}-guarantees.json"
    path.write_text(json.dumps(published, indent=2) + "\n", encoding="utf-8")
    PAGE.write_text(rewritten(PAGE.read_text(), block(published)))
    return path


def from_file(source: Path) -> None:
    PAGE.write_text(rewritten(PAGE.read_text(), block(json.loads(source.read_text()))))
