"""Worker processes frozen (SIGSTOP) inside their handlers: for 3 leases, others re-run the jobs
and every write the thawed holder attempts is refused; for half a lease, nothing is reclaimed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.rows import FreezeSize, PauseSize, freeze_rounds, short_freezes

pytestmark = pytest.mark.soak

FREEZE_CI = FreezeSize(rounds=20)
PAUSE_CI = PauseSize(rounds=5)


@pytest.mark.timeout(300)
async def test_a_holder_frozen_for_three_leases_is_superseded_and_its_writes_refused(
    tmp_path: Path,
) -> None:
    result = await freeze_rounds(tmp_path, FREEZE_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.stranded == 0
    assert verdict.completed == FREEZE_CI.rounds * FREEZE_CI.jobs_per_round
    # Every frozen round's jobs were taken over, within lease + beat + slack of the freeze...
    assert len(verdict.recovery_s) >= FREEZE_CI.rounds
    assert result.bound_s is not None
    assert max(verdict.recovery_s) <= result.bound_s, sorted(verdict.recovery_s)[-5:]
    # ...and each thawed holder learnt it from a refused write, never from an accepted one.
    refused = sum(facts[k] for k in ("write_fenced", "settle_refused", "lease_lost", "self_fenced"))
    assert refused >= len(verdict.recovery_s), facts


@pytest.mark.timeout(300)
async def test_a_holder_frozen_for_half_a_lease_keeps_its_jobs(tmp_path: Path) -> None:
    result = await short_freezes(tmp_path, PAUSE_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert verdict.completed == PAUSE_CI.rounds * PAUSE_CI.jobs_per_round
    assert verdict.lost_count == 0
    assert verdict.extra_runs == 0
    assert facts["job_reaped"] == 0
    assert facts["lease_lost"] == 0
    assert facts["self_fenced"] == 0
    assert facts["write_fenced"] == 0
    assert facts["settle_refused"] == 0
