"""redis-server SIGKILLed and restarted under running workers: with AOF (appendfsync always)
nothing is lost and attempts never go backwards; without persistence the workers survive, log
the restart, and accept no stale write."""

from __future__ import annotations

from pathlib import Path

import pytest

from emq_worker.runtime.queue_health import BACKOFF_CAP_S
from tests.chaos.rows import AmnesiaSize, RestartSize, redis_amnesia, redis_restarts

pytestmark = pytest.mark.fault

RESTART_CI = RestartSize(jobs=3_000, restarts=10)
AMNESIA_CI = AmnesiaSize()


@pytest.mark.timeout(300)
async def test_redis_restarts_with_aof_lose_nothing_and_attempts_never_go_backwards(
    tmp_path: Path,
) -> None:
    result = await redis_restarts(tmp_path, RESTART_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert verdict.completed == RESTART_CI.jobs
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.regressed == [], verdict.regressed[:10]
    assert verdict.stranded == 0
    assert facts["workers_exited_early"] == 0
    # Reconnection backs off (capped, jittered) rather than spinning or giving up.
    assert facts["beat_failed"] >= 1
    assert facts["max_retry_in_ms"] <= BACKOFF_CAP_S * 1000
    assert facts["server_restarted_logged"] >= RESTART_CI.workers


@pytest.mark.timeout(180)
async def test_a_restart_without_persistence_is_survived_logged_and_writes_nothing_stale(
    tmp_path: Path,
) -> None:
    result = await redis_amnesia(tmp_path, AMNESIA_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert facts["workers_alive_after"] == AMNESIA_CI.workers
    assert facts["server_restarted_logged"] >= AMNESIA_CI.workers
    assert verdict.stale == []
    assert verdict.duplicated_count == 0
    assert facts["lost_after_restart"] == 0
    assert facts["completed_after_restart"] == AMNESIA_CI.jobs_after
    # The jobs held when the data vanished: their holders' writes were refused, not accepted.
    assert facts["settle_refused"] + facts["lease_lost"] >= 1, facts
