"""Worker processes SIGKILLed at random during a run: nothing lost, duplicated or stale, and every
orphaned job runs again within lease + beat + slack."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.rows import KillSize, sigkill_soak

pytestmark = pytest.mark.soak

CI_SIZE = KillSize(jobs=10_000, workers=3, kills=20)


@pytest.mark.timeout(300)
async def test_random_sigkills_lose_duplicate_and_stale_nothing(tmp_path: Path) -> None:
    result = await sigkill_soak(tmp_path, CI_SIZE)
    verdict = result.verdict
    print(result.record())
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0, verdict.duplicated[:10]
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.stranded == 0
    assert verdict.completed == CI_SIZE.jobs
    assert verdict.recovery_s, "no kill orphaned a job: the row proved nothing"
    assert result.bound_s is not None
    assert max(verdict.recovery_s) <= result.bound_s, sorted(verdict.recovery_s)[-5:]
