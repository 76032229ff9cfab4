"""`python -m bench --publish [--from JSON] [--server ...]`: the figures the README shows, all
from one run at HEAD.

Runs, for every system of `python -m bench` (emq-worker, BullMQ on Node.js and its Python port,
taskiq, SAQ, streaq, arq), the measurements the table shows (`--plan publish --scenarios
drain,sleep,realistic,latency`: the full plan's sizes and median of 3, cut to no-op drains at
concurrency 100, 1 ms drains at 1 000, the realistic body on its own client and on the
framework's, and pickup latency; sized for about 20 minutes on a quiet 2-core machine before
BullMQ's Python port joined, which adds some 10-20), then the
idle cost of one worker on 100 queues over a minute (`python -m bench --idle --rows 1:100:0
--window 60`), writes one JSON under docs/benchmarks/ (`<date>-published.json`: commit, date,
machine, versions, the medians and the idle cost), and rewrites README's headline table
(between its `headline` markers) and docs/explanation/performance.md's generated tables
(bench/performance_page.py) from it. `--from JSON` only rewrites the tables from a published
JSON. tests/test_published_figures.py fails when README's table or the page's differ from the
latest published JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.peers import SYSTEMS
from bench.plan import PUBLISHED_SCENARIOS

REPO = Path(__file__).resolve().parent.parent
PUBLISHED = REPO / "docs" / "benchmarks"
README = REPO / "README.md"
BEGIN, END = "<!-- headline:begin (python -m bench --publish) -->", "<!-- headline:end -->"
IDLE_ROW, IDLE_WINDOW_S = "1:100:0", 60.0
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("no-op jobs/s, concurrency 100", "drain.noop.c100.jobs_s", "count"),
    (
        "jobs making one Redis call each on their own client, jobs/s, concurrency 100",
        "drain.incr.c100.jobs_s",
        "count",
    ),
    (
        "the same call on the framework's client (emq-worker: `ctx.redis`)¹, jobs/s",
        "drain.incr_handler.c100.jobs_s",
        "count",
    ),
    ("1 ms jobs/s, concurrency 1 000", "drain.sleep1ms.c1000.jobs_s", "count"),
    ("idle pickup p50 (enqueue to handler start)", "latency.idle.p50_ms", "ms"),
    ("worker round trips per job", "drain.noop.c100.round_trips", "ratio"),
)
"""README's rows: a label, the metric of `median` it shows, and how it is written."""
HANDLER_CLIENT_NOTE = (
    "¹ arq's `ctx[\"redis\"]`, SAQ's queue client, streaq's `worker.redis`; taskiq and BullMQ hand "
    "their jobs no client, so this row is their own client's again."
)
IDLE_LABEL = (
    "one idle worker on 100 queues, Redis commands/s "
    "([idle cost](docs/explanation/performance.md#idle-cost))"
)
LABELS = {
    "emq": "emq-worker",
    "bullmq_node": "BullMQ (Node.js)",
    "bullmq_py": "BullMQ (Python)",
    "taskiq": "taskiq",
    "saq": "SAQ",
    "streaq": "streaq",
    "arq": "arq",
}
"""The table's columns, in order: emq-worker, then the peer users most often pick instead."""


def latest() -> Path:
    """The newest published JSON (names start with the date)."""
    found = sorted(PUBLISHED.glob("*-published.json"))
    if not found:
        raise FileNotFoundError(f"no *-published.json under {PUBLISHED}")
    return found[-1]


def written(value: float | None, kind: str) -> str:
    if value is None:
        return ""
    if kind == "count":
        return f"{value:,.0f}".replace(",", " ")
    if kind == "ms":
        digits = 0 if value >= 100 else 1 if value >= 10 else 2
        return f"{value:.{digits}f} ms"
    return f"{value:.2f}" if value < 1 else f"{value:.1f}"


def headline(published: dict[str, Any]) -> str:
    """README's block: where the figures come from, then the table (a column per system the
    published run measured, a row left empty where a run did not measure it)."""
    median: dict[str, dict[str, float]] = published["median"]
    systems = [name for name in LABELS if name in median]
    versions = published.get("versions", {})
    named = [f"{LABELS[name]} {_version(versions, name)}" for name in systems[1:]]
    peers = ", ".join(named[:-1]) + (" and " if len(named) > 1 else "") + named[-1]
    machine = published["machine"]
    lines = [
        f"From `python -m bench --publish` at commit {published['commit']}, on "
        f"{published['date'][:10]}: emq-worker, {peers} side by side on one "
        f"{machine['nproc']}-core machine and one {machine.get('server', 'Redis')}, median of "
        f"{published['repeat']} ([all figures and how they are measured]"
        f"(docs/explanation/performance.md)):",
        "",
        "| | " + " | ".join(LABELS[name] for name in systems) + " |",
        "| --- |" + " ---: |" * len(systems),
    ]
    shown = [row for row in HEADLINE if any(row[1] in median[name] for name in systems)]
    for label, metric, kind in shown:
        cells = [written(median[name].get(metric), kind) for name in systems]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    idle = written(published["idle"]["commands_s"], "count")
    lines.append(f"| {IDLE_LABEL} | {idle} |" + " |" * (len(systems) - 1))
    if any("incr_handler" in metric for _, metric, _ in shown):
        lines += ["", HANDLER_CLIENT_NOTE]
    return "\n".join(lines)


def _version(versions: dict[str, dict[str, str]], name: str) -> str:
    """The system's own package version (BullMQ's is `bullmq` in `bullmq_node`'s)."""
    package = SYSTEMS[name].packages[0] if name in SYSTEMS else name
    return versions.get(name, {}).get(package, "?")


def rewritten(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """`text` with what stands between the markers replaced by `block` (README's by default;
    the guarantees page's table uses its own, tests/chaos/publish.py)."""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no {begin} ... {end} block to rewrite")
    return pattern.sub(lambda _: f"{begin}\n{block}\n{end}", text, count=1)


def block_of(text: str, begin: str = BEGIN, end: str = END) -> str:
    """What stands between the markers."""
    if begin not in text or end not in text:
        raise ValueError(f"no {begin} ... {end} block")
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[start:stop].strip("\n")


def compose(raw: dict[str, Any], idle_commands_s: float) -> dict[str, Any]:
    """The published JSON: what the README is generated from."""
    return {
        "commit": raw["machine"]["commit"],
        "date": raw["date"],
        "machine": raw["machine"],
        "versions": raw["versions"],
        "event_loop": raw["event_loop"],
        "repeat": raw["plan"]["repeat"],
        "median": raw["median"],
        "idle": {"row": IDLE_ROW, "window_s": IDLE_WINDOW_S, "commands_s": idle_commands_s},
        "raw": raw,
    }


def measure_idle(server: str | None) -> float:
    from bench import idle

    [(_, cost)] = idle.measure_rows([idle.Row.parse(IDLE_ROW)], IDLE_WINDOW_S, server)
    return cost.commands_s


def run(server: str | None, quick: bool = False) -> dict[str, Any]:
    """The publish plan's scenarios for every system (`--quick`: the quick plan's), then the
    idle cost."""
    from bench.__main__ import main as bench_main

    with tempfile.TemporaryDirectory() as tmp:
        raw_path = Path(tmp) / "bench.json"
        server_args = ["--server", server] if server else []
        plan_args = ["--quick"] if quick else ["--plan", "publish"]
        scenarios = ["--scenarios", ",".join(PUBLISHED_SCENARIOS)]
        code = bench_main(["--json", str(raw_path), *server_args, *plan_args, *scenarios])
        if code != 0:
            raise SystemExit(f"python -m bench failed ({code}): nothing published")
        raw = json.loads(raw_path.read_text())
    return compose(raw, measure_idle(server))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench --publish", description=__doc__)
    parser.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--from", dest="source", type=Path, help="a published JSON: tables only")
    parser.add_argument("--server", default=None, metavar="redis|valkey|PATH")
    parser.add_argument("--quick", action="store_true", help="the quick plan: to try, not publish")
    args = parser.parse_args(argv)
    from bench import performance_page  # (it imports this module)

    if args.source is None:
        published = run(args.server, args.quick)
        day = dt.datetime.now(dt.UTC).date().isoformat()
        path = PUBLISHED / f"{day}-published.json"
        path.write_text(json.dumps(published, indent=2) + "\n")
        print(f"published {path.relative_to(REPO)}", file=sys.stderr)
    else:
        published, path = json.loads(args.source.read_text()), args.source
    README.write_text(rewritten(README.read_text(), headline(published)))
    performance_page.rewrite(published, path)
    print(
        f"rewrote README.md's headline table and performance.md's tables from commit "
        f"{published['commit']}",
        file=sys.stderr,
    )
    return 0
