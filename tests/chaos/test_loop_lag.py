"""A handler that blocks the event loop for longer than a lease: its worker cannot renew, so the
job is taken over and the blocked holder's late write is refused; the loop-lag monitor logs
`event_loop_blocked` and /metrics shows the stall. A sync handler (run in a thread) blocking just
as long triggers none of it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from emq_worker.observe.looplag import warn_after_ms
from tests.chaos.faults import Fleet, enqueue, judge, wait_drained
from tests.chaos.ledger import START, read_ledger
from tests.chaos.rows import rejections, stage, stop_gracefully
from tests.support.processes import WorkerProcess, WorkerProcesses
from tests.support.wait import eventually

pytestmark = pytest.mark.fault

LEASE_MS = 1_000
BEAT_MS = 200
BLOCK_MS = 2_500


async def metric(worker: WorkerProcess, name: str) -> float:
    port = (await worker.wait_event("http_serving"))["port"]
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def _started_by(
    processes: WorkerProcesses, job: str, worker: WorkerProcess
) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return any(
            e.kind == START and e.job == job and e.pid == worker.pid
            for e in read_ledger(processes.ledger.path.parent)
        )

    return probe


@pytest.mark.timeout(120)
async def test_a_handler_blocking_the_loop_past_a_lease_is_fenced_and_reported(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path) as (server, client, processes):
        fleet = Fleet(
            processes, "chaos.block", server.url, LEASE_MS, BEAT_MS, extra=["--http", "127.0.0.1:0"]
        )
        blocker = (await fleet.start(1))[0]
        # The blocker blocks for BLOCK_MS and until the rescuer has taken the job over: on a
        # loaded machine the rescuer took 4.5 s to start, and the blocker, unblocked first,
        # reaped its own lapsed lease and ran the job again itself.
        taken_over = tmp_path / "taken-over"
        [job] = ids = await enqueue(
            client, fleet.queue, 1, "block_loop", ms=BLOCK_MS, until=str(taken_over)
        )
        await blocker.wait_event("job_claimed", within_s=30)
        rescuer = (await fleet.start(1))[0]
        await eventually(_started_by(processes, job, rescuer), timeout=60, what="the takeover")
        taken_over.touch()
        await wait_drained(client, fleet.queue, within_s=60)
        blocked = await blocker.wait_event("event_loop_blocked", within_s=30)
        assert blocked["lag_ms"] >= LEASE_MS
        assert blocked["warn_ms"] == warn_after_ms(LEASE_MS)
        assert await metric(blocker, "emq_event_loop_stalls_total") >= 1
        assert await metric(blocker, "emq_event_loop_lag_max_seconds") >= LEASE_MS / 1000
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
    assert verdict.completed == 1
    assert verdict.stale == []
    assert verdict.duplicated_count == 0
    assert verdict.lost_count == 0
    assert verdict.extra_runs == 1  # the rescuer's run
    facts = rejections(fleet)
    refused = facts["write_fenced"] + facts["settle_refused"] + facts["lease_lost"]
    assert refused + facts["self_fenced"] + facts["job_abandoned"] >= 1, facts
    assert rescuer.find("job_completed")
    assert not rescuer.find("event_loop_blocked")


@pytest.mark.timeout(120)
async def test_a_sync_handler_blocking_as_long_in_its_thread_keeps_its_lease(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path) as (server, client, processes):
        fleet = Fleet(
            processes,
            "chaos.thread",
            server.url,
            LEASE_MS,
            BEAT_MS,
            extra=["--http", "127.0.0.1:0"],
        )
        worker, other = await fleet.start(2)
        ids = await enqueue(client, fleet.queue, 2, "block_thread", ms=BLOCK_MS)
        await wait_drained(client, fleet.queue, within_s=60)
        assert await metric(worker, "emq_event_loop_stalls_total") == 0
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
    assert verdict.completed == 2
    assert verdict.extra_runs == 0
    assert not worker.find("event_loop_blocked")
    assert not other.find("event_loop_blocked")
    assert rejections(fleet)["job_reaped"] == 0
