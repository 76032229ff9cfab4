"""`--check-window-ms`: how long a queue that nothing wakes goes unchecked, i.e. the longest wait
for a job that EchoMQ's own producers put in `pending` (their flat enqueue pushes no wake token).
The default (ten beats) lets an idle worker ask little of the server; a queue fed by EchoMQ's
producers can choose a shorter window."""

from __future__ import annotations

import time

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker.errors import ConfigError
from emq_worker.jobs import codec
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.keys import QueueKeys
from emq_worker.runtime.agenda import check_window_s
from tests.support.conformance import TEST_NODE_ID
from tests.support.running import holding_worker, worker_settings
from tests.support.wait import eventually

CHOSEN_MS = 1_000
SLACK_S = 3.0
"""Room for a loaded machine; far below the default window (10 s at a 1 s beat), which a job put
in pending just after a check would wait out."""


def test_the_window_is_ten_beats_unless_chosen_and_never_over_a_third_of_the_lease() -> None:
    assert check_window_s(1, 1.0, 60.0) == 10.0
    assert check_window_s(1, 1.0, 60.0, 2.0) == 2.0
    assert check_window_s(1, 1.0, 3.0, 2.0) == 1.0


def test_a_window_shorter_than_a_beat_is_refused_naming_it(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="check_window_ms must be an integer >= 1000; got 500"):
        worker_settings("q", redis_url, beat_ms=1_000, check_window_ms=500)


async def test_a_job_enqueued_without_a_wake_starts_within_the_chosen_window(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    keys = QueueKeys.of(queue_name)
    settings = worker_settings(
        queue_name, redis_url, beat_ms=1_000, lease_ms=60_000, check_window_ms=CHOSEN_MS
    )
    async with holding_worker(settings) as (_, holding):
        # The worker's first check of the queue (at start) has been made: it vouches for the
        # queue one window from now.
        await eventually(lambda: client.exists(keys.upkeep), what="the worker's first check")
        job_id = SnowflakeMinter(TEST_NODE_ID).job_id()
        began = time.monotonic()
        # EchoMQ's flat enqueue: the row and `ZADD pending`, no wake token.
        await client.hset(
            keys.job(job_id),
            mapping={"state": "pending", "attempts": "0", "payload": codec.encode("hold")},
        )
        await client.zadd(keys.pending, {job_id: 0})
        with anyio.fail_after(CHOSEN_MS / 1000 + SLACK_S):
            await holding.started.wait()
    assert time.monotonic() - began <= CHOSEN_MS / 1000 + SLACK_S
