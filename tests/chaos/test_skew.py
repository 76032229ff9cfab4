"""Worker wall clocks an hour off (Debian's `faketime`, CLOCK_MONOTONIC untouched) behave exactly
like the baseline: every job completes once, no lease is lost, reaped or self-fenced, and
renewals keep leases alive through jobs longer than a lease. That proves no lease decision uses
the worker's wall clock: deadlines come from the server's TIME, pacing from the monotonic clock.
"""

from __future__ import annotations

import calendar
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.chaos.faults import CHAOS_APP, Fleet, enqueue, judge, wait_drained
from tests.chaos.ledger import LEDGER_ENV, read_ledger
from tests.chaos.rows import stage
from tests.support.processes import EMQ_WORKER, REPO_ROOT, WorkerProcess, WorkerProcesses

pytestmark = [
    pytest.mark.fault,
    pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime"),
]

QUEUE = "skew"
LEASE_MS = 1_500
BEAT_MS = 200
CONCURRENCY = 20
JOBS = CONCURRENCY
"""One round: every job held at once, each through renewals."""
JOB_MS = 2_000
"""Longer than a lease: each job lives only because renewals move its deadline."""
HOUR_S = 3_600.0
LOST_EVENTS = ("lease_lost", "lease_self_fenced", "job_reaped", "beat_reaped", "write_fenced")


def spawn_skewed(processes: WorkerProcesses, name: str, url: str, skew: str) -> WorkerProcess:
    """`faketime -f <skew> emq-worker run ...`, the monotonic clock left alone."""
    args = ["faketime", "-f", skew] if skew else []
    args += [str(EMQ_WORKER), "run", "--queue", QUEUE, "--app", CHAOS_APP]
    args += ["--app-dir", str(REPO_ROOT), "--redis-url", url, "--lease-ms", str(LEASE_MS)]
    args += ["--beat-ms", str(BEAT_MS), "--log-format", "json", "--concurrency", str(CONCURRENCY)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env[LEDGER_ENV] = str(processes.ledger.path)
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    processes.directory.mkdir(parents=True, exist_ok=True)
    log_path = processes.directory / f"{name}.log"
    with log_path.open("ab") as log:
        # A session of its own: faketime forks the daemon, and killing faketime alone would
        # leave the daemon running after the test.
        popen = subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    worker = WorkerProcess(name, popen, log_path, own_group=True)
    processes.started.append(worker)
    return worker


@pytest.mark.parametrize(
    ("skew", "offset_s"),
    [("", 0.0), ("+1h", HOUR_S), ("-1h", -HOUR_S)],
    ids=["baseline", "plus-1h", "minus-1h"],
)
async def test_a_worker_an_hour_off_behaves_like_the_baseline(
    tmp_path: Path, skew: str, offset_s: float
) -> None:
    async with stage(tmp_path, appendonly=False, queue=QUEUE) as (server, client, processes):
        worker = spawn_skewed(processes, "skewed", server.url, skew)
        started = await worker.wait_event("worker_started", within_s=60)
        before = time.monotonic()
        ids = await enqueue(client, QUEUE, JOBS, "work", ms=JOB_MS)
        await wait_drained(client, QUEUE, within_s=60, what=f"under skew {skew or 'none'}")
        after = time.monotonic()

        fleet = Fleet(processes, QUEUE, server.url, LEASE_MS, BEAT_MS)
        verdict = await judge(client, fleet, ids)
        print({"skew": skew or "none", **verdict.summary()})
        assert verdict.ok, verdict.summary()
        assert verdict.completed == JOBS
        assert verdict.extra_runs == 0, "a job ran twice: a lease lapsed under a skewed clock"
        for name in LOST_EVENTS:
            assert worker.find(name) == [], (name, worker.tail())

        # The skew was real, and only on the wall clock: the worker's log timestamps and the
        # handlers' wall times are an hour off, their monotonic times are the test's.
        stamp = started["timestamp"]
        logged_wall = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
        assert abs(logged_wall - (time.time() + offset_s)) < 120, stamp
        events = read_ledger(processes.ledger.path.parent)
        assert events
        for event in events:
            assert before - 1 <= event.mono <= after + 1, "CLOCK_MONOTONIC was faked"
            assert abs(event.wall - time.time() - offset_s) < 120
