"""docs/explanation/performance.md's generated tables, from one published JSON.

`python -m bench --publish` (and `--publish --from JSON`) rewrites README's headline table and,
with this module, three blocks of the performance page between their markers: where the figures
come from and the drains and latency table, the realistic bodies' table, and the idle cost of
the same run. Every row is the bench's own (`bench.report.rows`), every cell a median of the
published run, so the page cannot show a figure the JSON does not hold.
tests/test_published_figures.py fails when a block differs from the latest published JSON.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench import publish
from bench.peers import SYSTEMS
from bench.plan import Plan
from bench.report import Results, Row, table

PAGE = publish.REPO / "docs" / "explanation" / "performance.md"
Markers = tuple[str, str]
SOURCE: Markers = (
    "<!-- performance:drains:begin (python -m bench --publish) -->",
    "<!-- performance:drains:end -->",
)
REALISTIC: Markers = (
    "<!-- performance:realistic:begin (python -m bench --publish) -->",
    "<!-- performance:realistic:end -->",
)
IDLE: Markers = (
    "<!-- performance:idle:begin (python -m bench --publish) -->",
    "<!-- performance:idle:end -->",
)
BODIES = "drain.incr"
"""The realistic scenario's rows (`incr`, `incr_handler`, `incr_cpu1ms`) all start so."""


def plan_of(published: dict[str, Any]) -> Plan:
    """The plan the published run used (JSON turned its tuples into lists)."""
    fields = {f.name for f in dataclasses.fields(Plan)}
    given: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in published["raw"]["plan"].items()
        if k in fields
    }
    return Plan(**given)


def _results(published: dict[str, Any]) -> tuple[Results, list[tuple[str, str]]]:
    """The medians as one-run results (the median of one value is itself), and the columns."""
    median: dict[str, dict[str, float | None]] = published["median"]
    runs = {
        name: {metric: [value] for metric, value in got.items()} for name, got in median.items()
    }
    systems = [(name, system.label) for name, system in SYSTEMS.items() if name in median]
    return Results(runs=runs), systems


def _versions(published: dict[str, Any], systems: list[tuple[str, str]]) -> str:
    found: dict[str, dict[str, str]] = published.get("versions", {})
    said = [
        f"{label} ({', '.join(f'{k} {v}' for k, v in found.get(name, {}).items())})"
        for name, label in systems
    ]
    return "; ".join(said)


def source(published: dict[str, Any], name: str) -> str:
    """Where the figures come from: the run, the machine, the versions, the raw file."""
    machine, raw = published["machine"], published["raw"]
    pinning = raw.get("pinning") or {}
    pinned = ", ".join(f"{role} on core {core}" for role, core in pinning.items())
    _, systems = _results(published)
    return (
        f"From `python -m bench --publish` at commit {published['commit']}, on "
        f"{published['date'][:10]} (the run README's headline table comes from): "
        f"{machine['nproc']} cores ({machine.get('cpu_model', '?')}), {machine['server']}, "
        f"Python {machine['python']}, {published.get('event_loop', 'asyncio')} for the Python "
        f"systems; {pinned or 'nothing pinned'}; median of {published['repeat']}; drains of "
        f"{plan_of(published).drain_n:,} jobs{_caps(published)}; "
        f"raw numbers in `docs/benchmarks/{name}`. "
        f"Versions: {_versions(published, systems)}."
    ).replace(",000 jobs", " 000 jobs")


def _caps(published: dict[str, Any]) -> str:
    """The systems drained smaller (the plan's drain_caps), as the page names them."""
    caps = plan_of(published).drain_caps
    named = [f"{SYSTEMS[str(n)].label}: {int(size):,}" for n, size in caps if str(n) in SYSTEMS]
    named = [part.replace(",", " ") for part in named]
    return f" ({', '.join(named)})" if named else ""


def drains(published: dict[str, Any], name: str) -> str:
    results, systems = _results(published)
    rows = table(results, plan_of(published), systems, keep=lambda row: not _body(row))
    return source(published, name) + "\n\n" + rows


def realistic(published: dict[str, Any]) -> str:
    results, systems = _results(published)
    return table(results, plan_of(published), systems, keep=_body)


def idle(published: dict[str, Any]) -> str:
    cost = published["idle"]
    row, window = cost["row"], cost["window_s"]
    return (
        f"In the publish run at commit {published['commit']} (`python -m bench --idle --rows "
        f"{row} --window {window:.0f}`, one worker, 100 queues, nothing pending): "
        f"**{publish.written(cost['commands_s'], 'count')} commands/s**."
    )


def _body(row: Row) -> bool:
    return row.metric.startswith(BODIES)


def blocks(published: dict[str, Any], name: str) -> dict[Markers, str]:
    return {
        SOURCE: drains(published, name),
        REALISTIC: realistic(published),
        IDLE: idle(published),
    }


def rewritten(text: str, published: dict[str, Any], name: str) -> str:
    for (begin, end), block in blocks(published, name).items():
        text = publish.rewritten(text, block, begin, end)
    return text


def rewrite(published: dict[str, Any], source_path: Path) -> None:
    PAGE.write_text(rewritten(PAGE.read_text(), published, source_path.name))
