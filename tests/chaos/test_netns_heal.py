"""After a silent partition heals (netns.py): a producer cut mid-burst re-sends its burst with the
ids it chose and every id runs exactly once; a worker cut off for a long time stays up and runs
new jobs soon after the heal. Needs root and `ip netns` (skipped otherwise, saying so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emq_worker.runtime.config import SOCKET_TIMEOUT_MARGIN_MS
from emq_worker.runtime.queue_health import BACKOFF_CAP_S
from tests.chaos import netns
from tests.chaos.netheal import CADENCE, LongCutSize, ProducerCutSize, long_cut, producer_cut
from tests.chaos.test_netns_partitions import assert_safe

REASON = netns.unavailable()
pytestmark = [pytest.mark.fault, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

PRODUCER_CI = ProducerCutSize(bursts=60, cut_after=15, cut_s=2.0)
LONGCUT_CI = LongCutSize(cut_s=10.0, jobs=5, fresh_jobs=5)
RESUME_SLACK_S = 3.0
"""Start-up of the claim and the handler on a loaded 2-core machine, beyond the documented waits."""


@pytest.mark.timeout(120)
async def test_a_producer_cut_mid_burst_re_sends_it_and_each_id_runs_once(tmp_path: Path) -> None:
    result = await producer_cut(tmp_path, PRODUCER_CI)
    print(result.record())
    facts, size = result.facts, PRODUCER_CI
    assert facts["producer_exit"] == 0, facts
    assert facts["resends"] >= 1, f"no burst was re-sent: the cut missed the burst {facts}"
    assert facts["distinct"] == facts["acknowledged"] == size.bursts * size.burst, facts
    assert facts["ran_once"] == facts["distinct"], facts
    assert_safe(result)


@pytest.mark.timeout(120)
async def test_a_worker_cut_off_long_stays_up_and_resumes_after_the_heal(tmp_path: Path) -> None:
    """The bound: a beat whose call went into the cut waits out its socket timeout (beat + 10 s)
    at most once more, then the beat's backoff (at most 5 s) before it tries again."""
    size = LONGCUT_CI
    result = await long_cut(tmp_path, size)
    print(result.record())
    facts = result.facts
    assert facts["holder_up_after_heal"], facts
    assert facts["fresh_started_by_holder"] == facts["fresh_jobs"] == size.fresh_jobs, facts
    bound_s = (CADENCE.beat_ms + SOCKET_TIMEOUT_MARGIN_MS) / 1000 + BACKOFF_CAP_S + RESUME_SLACK_S
    assert facts["resumed_s"] <= bound_s, facts
    assert_safe(result)
