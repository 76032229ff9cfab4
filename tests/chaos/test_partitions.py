"""Network partitions and latency through a loopback proxy: a cut shorter than a lease costs
nothing; a cut longer than a lease hands the jobs to another worker, the cut-off worker stops
them itself, and its late writes are refused after the heal; 100 +/- 50 ms of latency at the
default cadence reclaims nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.rows import (
    LatencySize,
    PartitionSize,
    long_partitions,
    short_partitions,
    slow_network,
)

pytestmark = pytest.mark.soak

SHORT_CI = PartitionSize(rounds=3, lease_ms=3_000)
LONG_CI = PartitionSize(rounds=3, lease_ms=1_500)
LATENCY_CI = LatencySize(jobs=600)
SELF_FENCE_SLACK_S = 1.0


@pytest.mark.timeout(180)
async def test_a_partition_shorter_than_a_lease_reclaims_nothing(tmp_path: Path) -> None:
    result = await short_partitions(tmp_path, SHORT_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert verdict.completed == SHORT_CI.rounds * SHORT_CI.jobs_per_round
    assert verdict.lost_count == 0
    assert verdict.extra_runs == 0
    assert facts["job_reaped"] == 0, facts
    assert facts["lease_lost"] == 0, facts
    assert facts["self_fenced"] == 0, facts


@pytest.mark.timeout(180)
async def test_a_partition_longer_than_a_lease_hands_over_and_refuses_late_writes(
    tmp_path: Path,
) -> None:
    result = await long_partitions(tmp_path, LONG_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    jobs = LONG_CI.rounds * LONG_CI.jobs_per_round
    assert verdict.completed == jobs
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.duplicated_count == 0
    assert verdict.stale == []
    assert verdict.unexpected == []
    assert verdict.stranded == 0
    # Every job the cut-off worker was running at the cut was taken over, within lease + beat +
    # slack (those it had finished but not yet written too).
    assert facts["running_at_cut"] == jobs, facts
    assert len(verdict.recovery_s) >= facts["running_at_cut"]
    assert result.bound_s is not None
    assert max(verdict.recovery_s) <= result.bound_s, sorted(verdict.recovery_s)[-5:]
    # The cut-off worker stopped its long jobs itself, about a lease into the cut...
    assert facts["cut_off_self_fenced"] == jobs // 2, facts
    limit = (LONG_CI.lease_ms + LONG_CI.lease_ms / 3) / 1000 + SELF_FENCE_SLACK_S
    assert max(facts["self_fence_after_s"]) <= limit, facts["self_fence_after_s"]
    # ...and the completions it sent into the cut were refused once they got through.
    assert facts["cut_off_write_fenced"] + facts["cut_off_settle_refused"] >= LONG_CI.rounds


@pytest.mark.timeout(240)
async def test_latency_at_the_default_cadence_reclaims_nothing(tmp_path: Path) -> None:
    result = await slow_network(tmp_path, LATENCY_CI)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert verdict.completed == LATENCY_CI.jobs
    assert verdict.lost_count == 0
    assert verdict.extra_runs == 0
    assert facts["job_reaped"] == 0, facts
    assert facts["lease_lost"] == 0, facts
    assert facts["self_fenced"] == 0, facts
