"""Fair lanes under worker SIGKILL: nothing lost, duplicated or stale, no lane starved."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.lanes import LanesKillSize, lanes_kill

pytestmark = pytest.mark.soak

CI_SIZE = LanesKillSize()


@pytest.mark.timeout(300)
async def test_killed_workers_starve_no_lane_and_lose_nothing(tmp_path: Path) -> None:
    result = await lanes_kill(tmp_path, CI_SIZE)
    verdict, facts = result.verdict, result.facts
    print(result.record())
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0, verdict.duplicated[:10]
    assert verdict.stale == []
    assert verdict.unexpected == []
    total = CI_SIZE.deep_jobs + CI_SIZE.small_groups * CI_SIZE.small_jobs
    assert verdict.completed == total
    assert verdict.recovery_s, "no kill orphaned a job: the row proved nothing"
    assert result.bound_s is not None
    assert max(verdict.recovery_s) <= result.bound_s, sorted(verdict.recovery_s)[-5:]
    # Every lane was counted back to zero and left the ring: none stuck at its limit.
    assert (facts["gactive_left"], facts["ring_left"]) == (0, 0)
    # The small lanes were served beside the deep one, not after it.
    assert facts["last_small_done_s"] < 0.5 * facts["deep_done_s"], facts
