"""Redis out of memory (`maxmemory` just above usage, `noeviction`): enqueue is refused with a
clear error, a claim is refused whole (nothing popped, no attempt spent), the worker backs off
without spinning and resumes once memory is freed; nothing is lost. A worker warns at start when
the server may evict keys."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.exceptions import OutOfMemoryError

from emq_worker import JobSpec, Producer
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from tests.chaos.faults import Fleet, enqueue, judge, wait_drained
from tests.chaos.ledger import START, read_ledger
from tests.chaos.rows import stage
from tests.support.processes import EMQ_WORKER, WorkerProcess
from tests.support.serverfaults import (
    command_calls,
    exhaust_memory,
    free_memory,
    queue_state,
    worker_requests,
)
from tests.support.wait import eventually

pytestmark = pytest.mark.fault

QUEUE = "oom"
LEASE_MS = 1_500
BEAT_MS = 200
FAILED_BEATS = 5
"""Watched refusals: with the beat's backoff (0.1 s doubling, capped at 5 s) about 3 s of them."""
MAX_REQUESTS_PER_S = 10.0
"""A worker that backs off sends a few requests a second at most; a spinning one sends thousands."""


async def test_out_of_memory_refuses_enqueue_and_whole_claims_then_the_worker_resumes(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path, appendonly=False, queue=QUEUE) as (server, client, processes):
        fleet = Fleet(processes, QUEUE, server.url, LEASE_MS, BEAT_MS)
        queue = Queue(client, Scripts(), QUEUE)
        [worker] = await fleet.start(1)
        await queue.pause()
        ids = await enqueue(client, QUEUE, 10, "work", ms=20)

        await exhaust_memory(client)
        with pytest.raises(OutOfMemoryError):
            await Producer(client).enqueue_many(QUEUE, [JobSpec("work", {})])
        cli = await anyio.run_process(
            [str(EMQ_WORKER), "enqueue", "--queue", QUEUE, "work", "{}", "--redis-url", server.url],
            check=False,
        )
        said = cli.stderr.decode()
        assert cli.returncode == 1, said
        assert "OOM command not allowed" in said
        assert "out of memory" in said  # the hint: free memory or raise maxmemory

        await queue.resume()  # HDEL may run out of memory: it frees
        before = await command_calls(client)
        began = time.monotonic()
        await eventually(_failed_beats(worker, FAILED_BEATS), timeout=30, what="backed-off beats")
        refused = [e for e in worker.find("beat_failed") if "OOM" in e.get("error", "")]
        assert refused, worker.tail()
        state = await queue_state(client, QUEUE, ids)
        assert (state.pending, state.active, state.locks) == (10, 0, 0), state
        assert set(state.attempts.values()) == {0}, "a refused claim spent an attempt"
        sent = await command_calls(client) - before
        rate = worker_requests(sent) / (time.monotonic() - began)
        assert rate < MAX_REQUESTS_PER_S, sent
        assert worker.returncode is None, worker.tail()

        await free_memory(client)
        await wait_drained(client, QUEUE, within_s=30, what="after memory was freed")
        verdict = await judge(client, fleet, ids)
        print({"row": "OOM", "requests_per_s_while_refused": round(rate, 1), **verdict.summary()})
        assert verdict.ok, verdict.summary()
        assert verdict.completed == 10
        assert verdict.extra_runs == 0


async def test_a_long_job_held_through_out_of_memory_runs_again_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """Renewals are refused while memory is full (they write the lock), so a job longer than a
    lease is given up (self-fenced, or reaped first) and runs again once memory is freed: a
    spurious re-run, never a loss."""
    async with stage(tmp_path, appendonly=False, queue=QUEUE) as (server, client, processes):
        fleet = Fleet(processes, QUEUE, server.url, LEASE_MS, BEAT_MS)
        [worker] = await fleet.start(1)
        ids = await enqueue(client, QUEUE, 1, "work", ms=4 * LEASE_MS)
        await eventually(_started(fleet), timeout=20, what="the long job started")
        await exhaust_memory(client)

        # The holder gives the job up either way: its renewals fail for a whole lease (it
        # self-fences), or its own beat reaps the expired lease first (it hears the lease lost).
        async def given_up() -> list[dict[str, Any]]:
            return worker.find("lease_self_fenced") or worker.find("lease_lost")

        await eventually(given_up, timeout=20, what="the holder gave the job up")
        await free_memory(client)
        await wait_drained(client, QUEUE, within_s=60, what="after memory was freed")
        verdict = await judge(client, fleet, ids)
        print({"row": "OOM, long job", **verdict.summary()})
        assert verdict.ok, verdict.summary()
        assert verdict.completed == 1
        assert verdict.extra_runs <= 1


async def test_a_worker_warns_at_start_when_the_server_may_evict_keys(tmp_path: Path) -> None:
    async with stage(tmp_path, appendonly=False, queue=QUEUE) as (server, client, processes):
        await client.config_set("maxmemory-policy", "allkeys-lru")
        fleet = Fleet(processes, QUEUE, server.url, LEASE_MS, BEAT_MS)
        [worker] = await fleet.start(1)
        warning = await worker.wait_event("maxmemory_policy_unsafe", within_s=10)
        assert warning["policy"] == "allkeys-lru"
        assert "noeviction" in warning["reason"]

        await client.config_set("maxmemory-policy", "noeviction")
        [safe] = await fleet.start(1)
        assert safe.find("maxmemory_policy_unsafe") == []
        assert safe.find("server_check_skipped") == []


def _failed_beats(worker: WorkerProcess, count: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return len(worker.find("beat_failed")) >= count

    return probe


def _started(fleet: Fleet) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return any(e.kind == START for e in read_ledger(fleet.processes.ledger.path.parent))

    return probe
