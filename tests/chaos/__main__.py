"""The chaos runner: every row of the suite in one command, with a table and a JSON record.

    python -m tests.chaos            # CI sizes (what the tests run)
    python -m tests.chaos --full     # the issue's sizes: minutes, not seconds
    python -m tests.chaos --rows kill,freeze --json chaos.json
    python -m tests.chaos --publish  # --full, then the JSON and table of the guarantees page
    python -m tests.chaos --publish --from docs/benchmarks/<date>-guarantees.json  # table only

Rows run one after another, each on its own redis-server and worker processes in a temporary
directory. The runner reports; the tests assert.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

from emq_worker.observe import log
from tests.chaos import lanes, netcut, netheal, netns, publish, recovery, resend, rows
from tests.chaos.test_connections import HELD_CI, KILL_CI, LOST_CI
from tests.chaos.test_enqueue_resend import RESEND_CI
from tests.chaos.test_kill_recovery import CI_SIZE as RECOVERY_CI
from tests.chaos.test_lanes_kill import CI_SIZE as LANES_CI
from tests.chaos.test_netns_heal import LONGCUT_CI as NETNS_LONGCUT_CI
from tests.chaos.test_netns_heal import PRODUCER_CI
from tests.chaos.test_netns_partitions import HOG_CI, LATE_CI, LONG_CI, RANDOM_CI, TICK_CI
from tests.chaos.test_partitions import LATENCY_CI, SHORT_CI
from tests.chaos.test_partitions import LONG_CI as LONGCUT_CI
from tests.chaos.test_poison import BYSTANDERS_CI
from tests.chaos.test_poison import CI_SIZE as POISON_CI
from tests.chaos.test_redis_restart import AMNESIA_CI, RESTART_CI
from tests.chaos.test_worker_freeze import FREEZE_CI, PAUSE_CI
from tests.chaos.test_worker_kill import CI_SIZE as SIGKILL_CI
from tests.support.server import REDIS_SERVER

Row = Callable[[Path, Any], Awaitable[rows.RowResult]]


@dataclass(frozen=True, slots=True)
class Spec:
    run: Row
    ci: Any
    full: Any


SPECS: dict[str, Spec] = {
    "kill": Spec(rows.sigkill_soak, SIGKILL_CI, rows.KillSize()),
    "recovery": Spec(recovery.kill_recovery, RECOVERY_CI, recovery.RecoverySize()),
    "freeze": Spec(rows.freeze_rounds, FREEZE_CI, rows.FreezeSize()),
    "pause": Spec(rows.short_freezes, PAUSE_CI, rows.PauseSize()),
    "poison": Spec(rows.poison_job, POISON_CI, rows.PoisonSize()),
    "poison-c10": Spec(rows.poison_job, BYSTANDERS_CI, rows.PoisonSize(workers=2, concurrency=10)),
    "restart": Spec(rows.redis_restarts, RESTART_CI, rows.RestartSize()),
    "amnesia": Spec(rows.redis_amnesia, AMNESIA_CI, rows.AmnesiaSize()),
    "clientkill": Spec(rows.client_kills, KILL_CI, rows.ClientKillSize()),
    "lostreply": Spec(rows.lost_replies, LOST_CI, rows.LostReplySize()),
    "resend": Spec(resend.lost_enqueue_replies, RESEND_CI, resend.ResendSize()),
    "resend-redispy": Spec(
        resend.lost_enqueue_replies,
        replace(RESEND_CI, library_resends=True),
        resend.ResendSize(library_resends=True),
    ),
    "heldkill": Spec(rows.held_kills, HELD_CI, rows.HeldKillSize()),
    "shortcut": Spec(rows.short_partitions, SHORT_CI, rows.PartitionSize(rounds=5, lease_ms=3_000)),
    "longcut": Spec(rows.long_partitions, LONGCUT_CI, rows.PartitionSize(rounds=5)),
    "latency": Spec(rows.slow_network, LATENCY_CI, rows.LatencySize()),
    "lanes": Spec(
        lanes.lanes_kill,
        LANES_CI,
        lanes.LanesKillSize(deep_jobs=10_000, small_groups=40, small_jobs=50, kills=20),
    ),
    "netns-long": Spec(netcut.partition_runs, LONG_CI, netcut.CutSize("long")),
    "netns-hog": Spec(netcut.partition_runs, HOG_CI, netcut.CutSize("long", hog=True)),
    "netns-late": Spec(netcut.partition_runs, LATE_CI, netcut.CutSize("late")),
    "netns-tick": Spec(netcut.partition_runs, TICK_CI, netcut.CutSize("tick")),
    "netns-random": Spec(netcut.partition_runs, RANDOM_CI, netcut.CutSize("random")),
    "netns-producer": Spec(netheal.producer_cut, PRODUCER_CI, netheal.ProducerCutSize()),
    "netns-30s": Spec(netheal.long_cut, NETNS_LONGCUT_CI, netheal.LongCutSize()),
}
NEEDS_NAMESPACES = ("netns-",)
TERMINATED = 128 + signal.SIGTERM
"""The exit status of a run ended by SIGTERM (the shell's convention for a signal's death)."""
PROMISES: dict[Row, Callable[[rows.RowResult], bool]] = {
    netcut.partition_runs: netcut.promise_kept,
    netheal.producer_cut: netheal.promise_kept,
    netheal.long_cut: netheal.promise_kept,
}
"""A row's own promise beyond the checker's verdict (issue 26's figures)."""

COLUMNS = (
    ("row", 36),
    ("faults", 7),
    ("jobs", 7),
    ("lost", 5),
    ("duplicated", 10),
    ("stale", 6),
    ("dead", 5),
    ("extra_runs", 10),
    ("max_recovery_s", 14),
    ("p99_recovery_s", 14),
    ("bound_s", 8),
    ("seconds", 8),
)


def table(records: list[dict[str, Any]]) -> str:
    """A Markdown table of the records (the README's format)."""
    head = "| " + " | ".join(name.replace("_", " ") for name, _ in COLUMNS) + " |"
    rule = "|" + "|".join("-" * (width + 2) for _, width in COLUMNS) + "|"
    lines = [head, rule]
    for record in records:
        cells = ["-" if record.get(name) is None else str(record[name]) for name, _ in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run_rows(names: list[str], full: bool, keep: Path | None = None) -> list[dict[str, Any]]:
    records = []
    for name in names:
        spec = SPECS[name]
        size = spec.full if full else spec.ci
        skipped = netns.unavailable() if name.startswith(NEEDS_NAMESPACES) else None
        if skipped is not None:
            print(f"--- {name}: skipped: {skipped}", file=sys.stderr, flush=True)
            records.append({"name": name, "ok": True, "skipped": skipped})
            continue
        print(f"--- {name}: {size}", file=sys.stderr, flush=True)
        with _row_directory(name, keep) as directory:
            result = await spec.run(directory, size)
        promise = PROMISES.get(spec.run)
        # A row that promises a recovery bound and missed it is not ok, whatever else held.
        ok = result.verdict.ok and result.within_bound and (promise is None or promise(result))
        record = {"name": name, "ok": ok, **result.record()}
        print(json.dumps(record), file=sys.stderr, flush=True)
        records.append(record)
    return records


@contextmanager
def _row_directory(name: str, keep: Path | None) -> Iterator[Path]:
    """The row's scratch directory: a temporary one, or with --keep one left under `keep` with
    its server and worker logs (to read why a run failed)."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as directory:
            yield Path(directory)
        return
    keep.mkdir(parents=True, exist_ok=True)
    yield Path(tempfile.mkdtemp(prefix=f"{name}-", dir=keep))


async def run_until_terminated(
    names: list[str], full: bool, keep: Path | None
) -> list[dict[str, Any]] | None:
    """`run_rows`, or None once a SIGTERM cancelled it. The default SIGTERM ends the process
    without unwinding anything, which left each running row's network namespaces, server and
    workers behind; cancelling unwinds the rows' own context managers, which remove them."""
    records: list[dict[str, Any]] | None = None
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:

            async def cancel_on_signal() -> None:
                async for _ in signals:
                    group.cancel_scope.cancel()
                    return

            group.start_soon(cancel_on_signal)
            records = await run_rows(names, full, keep)
            group.cancel_scope.cancel()
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--full", action="store_true", help="the issue's sizes (long)")
    parser.add_argument("--rows", default=",".join(SPECS), help="comma-separated row names")
    parser.add_argument("--json", type=Path, default=None, help="write the records here")
    parser.add_argument(
        "--publish", action="store_true", help="--full, then docs/benchmarks/ and the table"
    )
    parser.add_argument("--from", dest="source", type=Path, help="with --publish: table only")
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep each row's directory (logs) under this one"
    )
    args = parser.parse_args(argv)
    if args.publish and args.source is not None:
        publish.from_file(args.source)
        return 0
    names = [name for name in args.rows.split(",") if name]
    unknown = [name for name in names if name not in SPECS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(SPECS)}")
    log.configure("json", "error")  # the runner's own client: no restart warnings on stderr
    started = time.monotonic()
    records = anyio.run(run_until_terminated, names, args.full or args.publish, args.keep)
    if records is None:
        print(
            "terminated (SIGTERM): the rows' namespaces, servers and workers removed",
            file=sys.stderr,
        )
        return TERMINATED
    print(table(records))
    if args.publish:
        server = publish.server_named(REDIS_SERVER)
        print(publish.publish(publish.compose(records, time.monotonic() - started, server)))
    if args.json is not None:
        args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    # Without persistence, jobs are lost by definition: reported, not failed.
    tolerated = {"amnesia"}
    unsafe = [r["name"] for r in records if r["name"] not in tolerated and not r["ok"]]
    if unsafe:
        print(f"failed (safety, recovery bound or promise): {', '.join(unsafe)}", file=sys.stderr)
    return 1 if unsafe else 0


if __name__ == "__main__":
    sys.exit(main())
