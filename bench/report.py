"""Results (every repetition's raw numbers), their medians, the Markdown table and the JSON file."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.plan import Plan

Better = Literal["higher", "lower", ""]


@dataclass(slots=True)
class Results:
    runs: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    notes: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)

    def record(self, system: str, metric: str, value: float | None) -> None:
        self.runs.setdefault(system, {}).setdefault(metric, []).append(value)

    def note(self, system: str, key: str, value: Any) -> None:
        self.notes.setdefault(system, {}).setdefault(key, []).append(value)

    def error(self, system: str, scenario: str, message: str) -> None:
        self.errors.append({"system": system, "scenario": scenario, "error": message})

    def median(self, system: str, metric: str) -> float | None:
        values = [v for v in self.runs.get(system, {}).get(metric, []) if v is not None]
        return statistics.median(values) if values else None

    def medians(self) -> dict[str, dict[str, float | None]]:
        return {
            system: {metric: self.median(system, metric) for metric in metrics}
            for system, metrics in self.runs.items()
        }


@dataclass(frozen=True, slots=True)
class Row:
    metric: str
    label: str
    better: Better = ""
    emq_only: bool = False
    peer_note: str = ""
    """What a peer column shows when the peer has no such number (e.g. no bulk API)."""


def rows(plan: Plan) -> list[Row]:
    out = [
        Row("enqueue.single.jobs_s", "enqueue one by one, jobs/s", "higher"),
        Row(
            "enqueue.concurrent.jobs_s",
            f"enqueue, {plan.enqueue_width} single enqueues in flight, jobs/s",
            "higher",
        ),
        Row(
            "enqueue.bulk.jobs_s",
            f"enqueue bulk (enqueue_many x {plan.bulk_batch}), jobs/s",
            "higher",
            peer_note="no bulk API",
        ),
    ]
    for task, concurrencies in (
        ("noop", plan.noop_concurrencies),
        ("sleep1ms", plan.sleep_concurrencies),
    ):
        for c in concurrencies:
            key, what = f"drain.{task}.c{c}", f"{task} drain c={c}"
            out += [
                Row(f"{key}.jobs_s", f"{what}: jobs/s", "higher"),
                Row(f"{key}.worker_cpu_ms", f"{what}: worker CPU ms/job", "lower"),
                Row(f"{key}.redis_cpu_ms", f"{what}: Redis CPU ms/job", "lower"),
                Row(f"{key}.redis_cmds", f"{what}: Redis commands/job (incl. Lua's)", "lower"),
                Row(f"{key}.round_trips", f"{what}: worker round trips/job", "lower"),
            ]
    c = plan.realistic_concurrency
    bodies = {
        "incr": "INCR body",
        "incr_handler": "INCR on the framework's handler client",
        "incr_cpu1ms": "INCR + 1 ms CPU body",
    }
    for task in plan.realistic_tasks:
        what = bodies[task]
        key, what = f"drain.{task}.c{c}", f"{what} drain c={c}"
        out += [
            Row(f"{key}.jobs_s", f"{what}: jobs/s", "higher"),
            Row(f"{key}.worker_cpu_ms", f"{what}: worker CPU ms/job", "lower"),
            Row(f"{key}.worker_cpu_busy_pct", f"{what}: worker CPU busy %"),
            Row(f"{key}.worker_idle_pct", f"{what}: worker idle (waiting on I/O) %", "lower"),
            Row(f"{key}.redis_cpu_ms", f"{what}: Redis CPU ms/job", "lower"),
            Row(f"{key}.redis_cmds", f"{what}: Redis commands/job (incl. Lua's)", "lower"),
            Row(
                f"{key}.round_trips",
                f"{what}: worker round trips/job (without the body's)",
                "lower",
            ),
        ]
    out += [
        Row("toplevel.cmds_per_job", "top-level commands/job (MONITOR, noop c=100)", "lower"),
        Row("latency.idle.p50_ms", "pickup latency idle, p50 ms", "lower"),
        Row("latency.idle.p99_ms", "pickup latency idle, p99 ms", "lower"),
        Row(
            "latency.load.p50_ms",
            f"pickup latency at {plan.load_rate:.0f} jobs/s, p50 ms",
            "lower",
        ),
        Row(
            "latency.load.p99_ms",
            f"pickup latency at {plan.load_rate:.0f} jobs/s, p99 ms",
            "lower",
        ),
        Row(
            "latency.claimed.idle.p50_ms",
            "pickup latency idle, hand-off off (wake, then claim), p50 ms",
            "lower",
            True,
        ),
        Row(
            "latency.claimed.idle.p99_ms",
            "pickup latency idle, hand-off off (wake, then claim), p99 ms",
            "lower",
            True,
        ),
        Row(
            "floor.handoff.p50_ms",
            "floor: bare LPUSH -> BLPOP hand-off idle, p50 ms",
            "lower",
            True,
        ),
        Row(
            "floor.handoff.p99_ms",
            "floor: bare LPUSH -> BLPOP hand-off idle, p99 ms",
            "lower",
            True,
        ),
        Row("floor.ping.p50_ms", "floor: one PING from an idle process, p50 ms", "lower", True),
        Row("floor.ping.p99_ms", "floor: one PING from an idle process, p99 ms", "lower", True),
    ]
    for k in plan.renew_ks:
        key, what = f"renewal.k{k}", f"renewal K={k}"
        out += [
            Row(f"{key}.calls_per_tick", f"{what}: renew script calls/tick", "lower", True),
            Row(f"{key}.round_trips_s", f"{what}: worker round trips/s while held", "lower", True),
            Row(f"{key}.sweep_ms", f"{what}: server ms per sweep", "lower", True),
            Row(f"{key}.max_call_ms", f"{what}: longest renew call, ms", "lower", True),
            Row(f"{key}.redis_cmds_s", f"{what}: Redis commands/s while held", "lower", True),
        ]
    out += [
        Row(
            "recovery.back_s",
            f"recovery of {plan.recovery_n} expired leases: all reaped, s after deadline",
            "lower",
            True,
        ),
        Row(
            "recovery.rerun_s",
            f"recovery of {plan.recovery_n} expired leases: all run again, s after deadline",
            "lower",
            True,
        ),
        Row("rss.idle_mb", "worker RSS idle, MB", "lower"),
        Row("rss.held_mb", f"worker RSS with {plan.rss_k} jobs in flight, MB", "lower"),
    ]
    return out


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}".replace(",", " ")
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def ratio(emq: float | None, peer: float | None) -> str:
    if emq is None or peer is None or peer == 0:
        return ""
    return f"{emq / peer:.2f}x"


def table(
    results: Results,
    plan: Plan,
    systems: list[tuple[str, str]],
    keep: Callable[[Row], bool] = lambda row: True,
) -> str:
    """Rows = metrics (those `keep` keeps), columns = systems, then emq/peer for each peer (when
    emq ran)."""
    names = [name for name, _ in systems]
    peers = [(n, label) for n, label in systems if n != "emq"]
    with_ratios = "emq" in names
    head = ["metric", *(label for _, label in systems)]
    if with_ratios:
        head += [f"emq/{label}" for _, label in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in filter(keep, rows(plan)):
        medians = {n: results.median(n, row.metric) for n in names}
        if all(v is None for v in medians.values()):
            continue
        cells = [row.label + {"higher": " ↑", "lower": " ↓", "": ""}[row.better]]
        for n in names:
            if n != "emq" and row.emq_only:
                cells.append("—")
            elif medians[n] is None and n != "emq" and row.peer_note:
                cells.append(row.peer_note)
            else:
                cells.append(fmt(medians[n]))
        if with_ratios:
            cells += ["" if row.emq_only else ratio(medians["emq"], medians[n]) for n, _ in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
