"""`python -m bench [--quick] [--repeat N] [--only emq,arq,saq] [--scenarios ...] [--json PATH]
[--server redis|valkey|PATH]`

Starts its own server (redis-server on PATH, else the embedded Valkey; or the --server one),
creates the peers' virtualenvs on first use, runs every selected scenario for every selected
system (interleaved, repetition by repetition), prints a Markdown table of medians with
emq-worker/peer ratios, and writes the raw numbers to a JSON file.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench import emq_only, scenarios
from bench.harness import Harness
from bench.peers import SYSTEMS, System, ensure_venv, versions
from bench.pinning import pin_self, plan_cores
from bench.plan import PLANS, SCENARIOS, Plan
from bench.procs import REPO, BenchError
from bench.report import Results, rows, table, write_json
from bench.server import BenchRedis, server_binary
from emq_worker.valkey.binary import ServerBinaryError

Measure = Callable[[Harness, System], None]
EMQ_ONLY = ("renewal", "recovery")


def measures(plan: Plan) -> dict[str, list[tuple[str, Measure]]]:
    """Scenario name -> its measurements (a name for errors, and the function)."""
    drains: dict[str, list[tuple[str, Measure]]] = {
        task: [
            (f"{task} c={c}", partial(scenarios.drain, task=task, concurrency=c))
            for c in concurrencies
        ]
        for task, concurrencies in (
            ("noop", plan.noop_concurrencies),
            ("sleep1ms", plan.sleep_concurrencies),
        )
    }
    c = plan.realistic_concurrency
    # The 1 ms-of-CPU body drains fewer jobs (it runs under 1 000 jobs/s).
    shares = {"incr_cpu1ms": plan.realistic_cpu_share}
    realistic: list[tuple[str, Measure]] = [
        (
            f"{task} c={c}",
            partial(scenarios.drain, task=task, concurrency=c, share=shares.get(task, 1)),
        )
        for task in plan.realistic_tasks
    ]
    return {
        "enqueue": [("enqueue", scenarios.enqueue)],
        "drain": drains["noop"],
        "sleep": drains["sleep1ms"],
        "realistic": realistic,
        "latency": [("latency", scenarios.latency)],
        "roundtrips": [("roundtrips", scenarios.roundtrips)],
        "renewal": [("renewal", emq_only.renewal)],
        "recovery": [("recovery", emq_only.recovery)],
        "rss": [("rss", scenarios.rss)],
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small N, one repetition (< 60 s)")
    parser.add_argument(
        "--plan",
        choices=tuple(PLANS),
        default="full",
        help="how big each scenario is (bench/plan.py); --quick is --plan quick; publish is the "
        "full plan cut to the measurements README's table shows",
    )
    parser.add_argument("--repeat", type=int, help="repetitions, median reported (full: 3)")
    parser.add_argument(
        "--only", default=",".join(SYSTEMS), help=f"systems (default all: {','.join(SYSTEMS)})"
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=",".join(SCENARIOS))
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "latest.json")
    parser.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="event loop for every system alike; auto = uvloop when this venv has it "
        "(as `emq-worker run` does), installing it into the peer venvs too",
    )
    parser.add_argument("--refresh-peers", action="store_true", help="rebuild the peer venvs")
    parser.add_argument(
        "--server",
        default=None,
        metavar="redis|valkey|PATH",
        help="the server binary (default: redis-server on PATH, else the embedded Valkey)",
    )
    args = parser.parse_args(argv)
    for name in args.only.split(","):
        if name not in SYSTEMS:
            parser.error(f"--only: unknown system {name!r} (known: {', '.join(SYSTEMS)})")
    for name in args.scenarios.split(","):
        if name not in SCENARIOS:
            parser.error(f"--scenarios: unknown {name!r} (known: {', '.join(SCENARIOS)})")
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def machine(redis: BenchRedis, nproc: int) -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return {
        "nproc": nproc,
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis_version": redis.version(),
        "server": redis.server(),
        "commit": commit,
    }


def prepare(systems: list[System], uvloop: bool, refresh: bool) -> dict[str, Any]:
    """Peer venvs (created when missing, timed) and every system's package versions."""
    built: dict[str, float | None] = {}
    for system in systems:
        seconds = ensure_venv(system, uvloop=uvloop, refresh=refresh)
        built[system.name] = seconds
        if seconds is not None:
            print(f"created {system.venv} in {seconds:.1f} s", file=sys.stderr)
    found = {system.name: versions(system) for system in systems}
    if uvloop:  # (Node.js has one loop, libuv's)
        missing = [
            s.label for s in systems if s.runtime == "python" and "uvloop" not in found[s.name]
        ]
        if missing:
            raise BenchError(f"uvloop is not installed for {', '.join(missing)}")
    return {"venv_build_s": built, "versions": found}


def run(h: Harness, systems: list[System], selected: list[str]) -> None:
    table_of = measures(h.plan)
    for repetition in range(h.plan.repeat):
        for scenario in selected:
            for system in systems:
                if scenario in EMQ_ONLY and system.name != "emq":
                    continue
                for name, measure in table_of[scenario]:
                    begun = time.monotonic()
                    try:
                        measure(h, system)
                    except BenchError as exc:
                        h.results.error(system.name, name, str(exc))
                        print(f"  {system.label} {name}: FAILED {exc}", file=sys.stderr)
                        continue
                    took = time.monotonic() - begun
                    print(
                        f"[{repetition + 1}/{h.plan.repeat}] {system.label} {name}: {took:.1f} s",
                        file=sys.stderr,
                    )


def main(argv: list[str] | None = None) -> int:
    if "--cluster" in (sys.argv[1:] if argv is None else argv):
        from bench import cluster  # its own options: python -m bench --cluster --help

        return cluster.main(sys.argv[1:] if argv is None else argv)
    if "--publish" in (sys.argv[1:] if argv is None else argv):
        from bench import publish  # its own options: python -m bench --publish --help

        return publish.main(sys.argv[1:] if argv is None else argv)
    if "--idle" in (sys.argv[1:] if argv is None else argv):
        from bench import idle  # its own options: python -m bench --idle --help

        return idle.main(sys.argv[1:] if argv is None else argv)
    args = parse(sys.argv[1:] if argv is None else argv)
    base = PLANS["quick" if args.quick else args.plan]
    plan = base if args.repeat is None else _with_repeat(base, args.repeat)
    systems = [SYSTEMS[name] for name in args.only.split(",")]
    selected = [s for s in SCENARIOS if s in args.scenarios.split(",")]
    uvloop = args.loop == "uvloop" or (
        args.loop == "auto" and importlib.util.find_spec("uvloop") is not None
    )
    cores = plan_cores()
    nproc = len(os.sched_getaffinity(0))
    pin_self(cores.driver)
    started = time.monotonic()
    try:
        binary = server_binary(args.server)
        prepared = prepare(systems, uvloop, args.refresh_peers)
    except (BenchError, ServerBinaryError) as exc:
        print(f"python -m bench: {exc}", file=sys.stderr)
        return 2
    results = Results()
    with (
        tempfile.TemporaryDirectory(prefix="emq-bench-") as tmp,
        BenchRedis(Path(tmp) / "redis", cores.redis, binary) as redis,
    ):
        logs = Path(tmp) / "logs"
        logs.mkdir()
        harness = Harness(redis, cores, plan, results, logs, uvloop)
        run(harness, systems, selected)
        info = machine(redis, nproc)
    elapsed = time.monotonic() - started
    labels = [(s.name, s.label) for s in systems]
    markdown = table(results, plan, labels)
    print(_preamble(plan, info, prepared, cores.enabled, uvloop, elapsed))
    print(markdown)
    if results.errors:
        print("\nErrors:")
        for error in results.errors:
            print(f"- {error['system']} {error['scenario']}: {error['error']}")
    write_json(
        args.json,
        {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": info,
            **prepared,
            "pinning": {"redis": cores.redis, "driver": cores.driver, "worker": cores.worker},
            "event_loop": "uvloop" if uvloop else "asyncio",
            "plan": dataclasses.asdict(plan),
            "scenarios": selected,
            "elapsed_s": round(elapsed, 1),
            "median": results.medians(),
            "runs": results.runs,
            "notes": results.notes,
            "errors": results.errors,
            "table": markdown,
            "rows": [row.metric for row in rows(plan)],
        },
    )
    print(f"\nraw results: {args.json}", file=sys.stderr)
    return 1 if results.errors else 0


def _with_repeat(plan: Plan, repeat: int) -> Plan:
    return dataclasses.replace(plan, repeat=repeat)


def _preamble(
    plan: Plan,
    info: dict[str, Any],
    prepared: dict[str, Any],
    pinned: bool,
    uvloop: bool,
    elapsed: float,
) -> str:
    found = prepared["versions"]
    peers = ", ".join(
        f"{SYSTEMS[name].label} {v.get(SYSTEMS[name].packages[0], '?')}"
        for name, v in found.items()
    )
    return (
        f"\n{info['nproc']} cores ({info['cpu_model']}), {info['server']}, "
        f"Python {info['python']}, {'uvloop' if uvloop else 'asyncio event loop'} for every "
        "Python system; "
        f"{'Redis + driver on core 0, worker on core 1' if pinned else 'no CPU pinning'}; "
        f"median of {plan.repeat}; drains of {plan.drain_n} jobs"
        f"{''.join(f' ({name}: {n})' for name, n in plan.drain_caps)}; {peers}; "
        f"took {elapsed:.0f} s.\n"
    )


if __name__ == "__main__":
    sys.exit(main())
