"""A random worker SIGKILLed every few seconds under a mixed load (2 % of the jobs run past 3
leases, so deaths make suspects): every job whose lease was reaped starts again within
lease + beat + 1 s of that lease's deadline; nothing is lost or completed twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.recovery import RecoverySize, kill_recovery

pytestmark = pytest.mark.soak

CI_SIZE = RecoverySize(jobs=3_000, fault_s=15.0)


@pytest.mark.timeout(300)
async def test_every_reaped_job_starts_within_lease_beat_and_a_second_of_its_deadline(
    tmp_path: Path,
) -> None:
    result = await kill_recovery(tmp_path, CI_SIZE)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0, verdict.duplicated[:10]
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.stranded == 0
    assert verdict.completed == CI_SIZE.jobs
    assert facts["kills"] >= 3
    assert verdict.recovery_s, "no kill orphaned a job: the row proved nothing"
    assert result.bound_s is not None
    assert max(verdict.recovery_s) <= result.bound_s, sorted(verdict.recovery_s)[-5:]
