"""Enqueue bursts whose replies are lost, re-sent by the client library (the same call) and, for
caller-chosen ids, by the application, while a worker completes the jobs: every acknowledged
job runs to completion exactly once, none minted twice, none run again after it completed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.chaos.resend import ResendSize, lost_enqueue_replies

pytestmark = pytest.mark.fault

RESEND_CI = ResendSize(bursts=60, burst=20, replies_to_lose=30)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("library_resends", [False, True], ids=["producer", "redis-py"])
async def test_re_sent_enqueues_duplicate_nothing(tmp_path: Path, library_resends: bool) -> None:
    size = replace(RESEND_CI, library_resends=library_resends)
    result = await lost_enqueue_replies(tmp_path, size)
    print(result.record())
    verdict, facts = result.verdict, result.facts
    assert facts["replies_lost"] == size.replies_to_lose
    assert facts["acknowledged"] == size.bursts * size.burst
    assert facts["completed"] == facts["acknowledged"], facts
    assert facts["app_resends_enqueued"] == 0, facts
    assert verdict.duplicated_count == 0, verdict.duplicated[:10]
    assert verdict.unexpected == [], verdict.unexpected[:10]
    assert verdict.lost_count == 0, verdict.lost[:10]
    assert verdict.stranded == 0
