"""A job that kills its own worker process on every attempt is dead-lettered after exactly its
max attempts, while the good jobs around it all complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.app import POISON_MAX_ATTEMPTS
from tests.chaos.rows import PoisonSize, poison_job

pytestmark = pytest.mark.fault

CI_SIZE = PoisonSize(good_jobs=1_000, workers=3, concurrency=1)
BYSTANDERS_CI = PoisonSize(good_jobs=1_000, workers=2, concurrency=10)


@pytest.mark.timeout(240)
async def test_a_process_killing_job_is_dead_lettered_after_exactly_max_attempts(
    tmp_path: Path,
) -> None:
    result = await poison_job(tmp_path, CI_SIZE)
    print(result.record())
    facts, verdict = result.facts, result.verdict
    assert facts["poison_state"] == "dead"
    assert facts["poison_attempts"] == POISON_MAX_ATTEMPTS
    assert facts["poison_starts"] == list(range(1, POISON_MAX_ATTEMPTS + 1))
    assert f"attempt {POISON_MAX_ATTEMPTS}" in facts["poison_last_error"]
    assert facts["respawned"] >= POISON_MAX_ATTEMPTS
    assert verdict.completed == CI_SIZE.good_jobs
    assert verdict.dead == 1
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.stranded == 0


@pytest.mark.timeout(240)
async def test_good_jobs_claimed_beside_a_poison_job_are_not_dead_lettered(
    tmp_path: Path,
) -> None:
    """At --concurrency 10 the poison job is claimed with good jobs and kills them with it; once
    reaped twice (or before their last attempt) they are all suspects, each claimed and run alone:
    only the poison job dies again, and only it reaches its max attempts."""
    result = await poison_job(tmp_path, BYSTANDERS_CI)
    print(result.record())
    facts, verdict = result.facts, result.verdict
    assert facts["poison_state"] == "dead"
    assert facts["poison_attempts"] == POISON_MAX_ATTEMPTS
    assert facts["poison_starts"] == list(range(1, POISON_MAX_ATTEMPTS + 1))
    assert facts["good_dead"] == 0
    assert verdict.unexpected == []
    assert verdict.completed == BYSTANDERS_CI.good_jobs
    assert verdict.dead == 1
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.stranded == 0
