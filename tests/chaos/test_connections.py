"""Connections killed under running workers (CLIENT KILL, including mid-claim and mid-ack), and
replies lost on the way back (a proxy forwards a claim or settle and drops its reply): nothing
lost, duplicated or left leased, and no job claimed twice at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.rows import (
    ClientKillSize,
    HeldKillSize,
    LostReplySize,
    client_kills,
    held_kills,
    lost_replies,
)

KILL_CI = ClientKillSize(jobs=8_000, kill_every_ms=250, max_kills=40, job_ms=20)
LOST_CI = LostReplySize(jobs=4_000, replies_to_lose=100, lose_rate=0.15)
HELD_CI = HeldKillSize(jobs=24)


@pytest.mark.soak
@pytest.mark.timeout(300)
async def test_killed_connections_lose_duplicate_and_strand_nothing(tmp_path: Path) -> None:
    result = await client_kills(tmp_path, KILL_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert facts["connections_killed"] >= 10, facts
    assert verdict.completed == KILL_CI.jobs
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.double_claimed == []
    assert verdict.stranded == 0
    # A claim whose reply was lost is re-sent with its nonce and gets its jobs back: none waits
    # for the reaper.
    assert facts["job_reaped"] == 0, facts


@pytest.mark.fault
@pytest.mark.timeout(300)
async def test_lost_claim_and_settle_replies_lose_duplicate_and_strand_nothing(
    tmp_path: Path,
) -> None:
    result = await lost_replies(tmp_path, LOST_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert facts["replies_lost"] == LOST_CI.replies_to_lose
    assert verdict.completed == LOST_CI.jobs
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.double_claimed == []
    assert verdict.stranded == 0
    assert verdict.dead == 0
    # Settles whose reply was lost were re-sent and answered from their receipts.
    assert facts["repeated_settles"] >= 1, facts


@pytest.mark.fault
@pytest.mark.timeout(120)
async def test_killed_idle_connections_self_fence_no_lease_of_a_long_job(tmp_path: Path) -> None:
    result = await held_kills(tmp_path, HELD_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert facts["connections_killed"] >= 10, facts
    assert facts["renew_failed"] == 0, facts  # a dropped connection costs no renewal tick
    assert facts["self_fenced"] == 0, facts
    assert verdict.extra_runs == 0, facts  # no job ran twice
    assert verdict.completed == HELD_CI.jobs
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.double_claimed == []
    assert verdict.stranded == 0
