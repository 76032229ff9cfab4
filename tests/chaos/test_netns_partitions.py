"""A silent partition (a network namespace whose veth link goes down: packets dropped, no reset)
between one worker and the server, while another worker reaches the server over a unix socket.

Lease 1500 ms, beat 250 ms, renewal every 500 ms; 20 long jobs and 5 whose completion is sent
into the cut. A cut longer than a lease: the other worker takes every job over, and the cut-off
worker stops each handler before the other starts it, also with a handler that blocks its event
loop 30 ms in every 100 ms, and when its last renewal before the cut went out 25 ms late. A cut
of 0.4 x lease, 30 ms before the cut-off worker's renewal tick or at a random instant, costs no
lease. Nothing is lost, completed twice or written late in any of them. Needs root and `ip netns`
(skipped otherwise, saying so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import netns
from tests.chaos.netcut import CutSize, partition_runs
from tests.chaos.rows import RowResult

REASON = netns.unavailable()
pytestmark = [pytest.mark.fault, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

# One run of each row per commit; the guarantees page's figures come from 10 runs of each
# (`python -m tests.chaos --full`).
LONG_CI = CutSize("long", runs=1)
HOG_CI = CutSize("long", runs=1, hog=True)
LATE_CI = CutSize("late", runs=1)
TICK_CI = CutSize("tick", runs=1)
RANDOM_CI = CutSize("random", runs=1)


def assert_safe(result: RowResult) -> None:
    verdict = result.verdict
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0, verdict.duplicated[:10]
    assert verdict.stale == [], "late writes accepted after the heal"
    assert verdict.unexpected == []
    assert verdict.stranded == 0


async def check_takeover(tmp_path: Path, size: CutSize) -> None:
    result = await partition_runs(tmp_path, size)
    print(result.record())
    facts = result.facts
    extra = int(size.hog) + int(size.scenario == "late")  # the loop-blocking job
    held = size.runs * (size.long_jobs + size.settling_jobs + extra)
    assert facts["not_running_at_cut"] == 0, facts  # (a claim answered late, given up unstarted)
    assert facts["taken_over"] == facts["held_at_cut"] == held, facts
    assert facts["never_stopped"] == 0, facts
    assert facts["overlapped"] == 0, (
        f"{facts['overlapped']} jobs ran on both workers, by up to {facts['max_overlap_ms']} ms; "
        f"the cut-off worker stopped them {facts['stop_after_deadline_ms']} ms after the "
        f"server's deadline (min, median, max)"
    )
    assert_safe(result)


@pytest.mark.timeout(90)
async def test_a_cut_longer_than_a_lease_stops_every_handler_before_the_takeover(
    tmp_path: Path,
) -> None:
    await check_takeover(tmp_path, LONG_CI)


@pytest.mark.timeout(90)
async def test_a_loop_blocking_handler_does_not_delay_the_stop_past_the_takeover(
    tmp_path: Path,
) -> None:
    await check_takeover(tmp_path, HOG_CI)


@pytest.mark.timeout(90)
async def test_a_late_renewal_tick_before_the_cut_does_not_delay_the_stop(tmp_path: Path) -> None:
    await check_takeover(tmp_path, LATE_CI)


async def check_no_lease_lost(tmp_path: Path, size: CutSize) -> None:
    result = await partition_runs(tmp_path, size)
    print(result.record())
    facts = result.facts
    assert facts["not_running_at_cut"] == 0, facts  # (leases A gave up before the cut)
    # A run whose cut may have lasted half a lease or more (its helper ran late on a loaded
    # machine) is outside the promise: reported, not judged; most runs must be inside it.
    assert facts["overlong_cuts"] < size.runs, facts["cut_ms"]
    assert facts["leases_lost_to_short_cuts"] == 0, (
        f"a cut of {size.short_leases} x lease cost {facts['leases_lost']} leases "
        f"({facts['runs_losing_leases']} of {size.runs} runs); "
        f"self-fenced {facts['holder_self_fenced']}, reaped {facts['job_reaped']}; the cuts "
        f"lasted {facts['cut_ms']} ms (min, median, max; the link down to up)"
    )
    if facts["overlong_cuts"] == 0:
        assert result.verdict.extra_runs == 0
    assert_safe(result)


@pytest.mark.timeout(90)
async def test_a_short_cut_just_before_a_renewal_tick_loses_no_lease(tmp_path: Path) -> None:
    await check_no_lease_lost(tmp_path, TICK_CI)


@pytest.mark.timeout(90)
async def test_a_short_cut_at_a_random_instant_loses_no_lease(tmp_path: Path) -> None:
    await check_no_lease_lost(tmp_path, RANDOM_CI)
