"""Seam 4: EchoMQ's obliterate deletes by known names, so it leaves the keys emq-worker adds
(`suspects`, `cancel`, claim memos, receipts, ...). `emq-worker obliterate` and `drain` match
EchoMQ's semantics and also remove our own keys."""

from __future__ import annotations

from typing import cast

import anyio
import pytest
from click.testing import CliRunner
from redis.asyncio import Redis

from emq_worker.admin import whole_queue
from emq_worker.admin.verbs import cancel_job
from emq_worker.cli.main import main
from tests.interop.echomq import EchoMQ
from tests.support.conformance import Harness, lapse

SHORT_LEASE_MS = 30


async def keys_left(client: Redis, prefix: str) -> set[str]:
    found = cast(list[bytes], [key async for key in client.scan_iter(match=prefix + "*")])
    return {key.decode()[len(prefix) :] for key in found}


async def busy_queue(conf: Harness) -> None:
    """A queue with what our worker leaves about: claim memos, a receipt, a cancel request, a
    suspect, a job enqueued under a dedup id without a TTL and one under a caller-chosen id; and a
    pending, an active, a scheduled and a dead job."""
    await conf.enqueue()
    await conf.complete(await conf.claim_one())
    await conf.enqueue()
    running = await conf.claim_one()
    await cancel_job(conf.queue, running.id)
    await conf.enqueue(delay_ms=60_000)
    await conf.enqueue()
    await conf.fail(await conf.claim_one(), max_attempts=0)
    suspect = await conf.enqueue()
    await conf.claim_one(SHORT_LEASE_MS)
    await lapse(2 * SHORT_LEASE_MS)
    assert (await conf.queue.reap(10, 2)).jobs == ((suspect, "pending"),)  # last attempt next
    await conf.producer.enqueue_raw(conf.queue.name, b"d", dedup_id="order-7")
    await conf.producer.enqueue_raw(conf.queue.name, b"c", job_id=conf.mint())


async def test_our_obliterate_removes_what_echomqs_leaves(conf: Harness, emq: EchoMQ) -> None:
    await busy_queue(conf)
    await emq.pause()
    assert await emq.obliterate(force=True) == "ok"
    left = await keys_left(conf.client, conf.keys.prefix)
    assert {"suspects", "cancel"} <= left
    assert any(key.startswith("claim:") for key in left)
    assert any(key.startswith("receipts:") for key in left)
    # Everything EchoMQ's obliterate leaves of ours expires by itself: the dedup key of a job
    # enqueued without a dedup TTL too (EchoMQ's own such keys stay, D9).
    endless = {key for key in left if await conf.client.pttl(conf.keys.prefix + key) < 0}
    assert endless == set()
    await conf.queue.pause()  # EchoMQ's obliterate deleted meta: the queue ended unpaused
    done = await whole_queue.obliterate_queue(conf.queue)
    assert done.complete
    assert await keys_left(conf.client, conf.keys.prefix) == set()


async def test_obliterate_refuses_unless_paused_and_with_active_jobs_unless_forced(
    conf: Harness,
) -> None:
    await busy_queue(conf)
    with pytest.raises(whole_queue.NotPausedError, match="not paused"):
        await whole_queue.obliterate_queue(conf.queue)
    await conf.queue.pause()
    with pytest.raises(whole_queue.ActiveJobsError, match="1 active"):
        await whole_queue.obliterate_queue(conf.queue)
    assert (await conf.queue.counts()).pending == 3
    done = await whole_queue.obliterate_queue(conf.queue, force=True, batch=2)
    assert done.jobs == 6  # the active one (forced), 3 pending, a scheduled and a dead one
    assert await keys_left(conf.client, conf.keys.prefix) == set()


async def test_drain_deletes_waiting_jobs_with_our_keys_and_leaves_active_ones(
    conf: Harness,
) -> None:
    ids = await conf.enqueue_many(3)
    deduped = (await conf.producer.enqueue_raw(conf.queue.name, b"d", dedup_id="o-1")).job_id
    await conf.client.sadd(conf.keys.suspects, ids[0])
    running = await conf.claim_one()
    later = await conf.enqueue(delay_ms=60_000)
    assert await whole_queue.drain_queue(conf.queue, batch=2) == 3
    counts = await conf.queue.counts()
    assert (counts.pending, counts.active, counts.scheduled) == (0, 1, 1)
    assert running.id == ids[0]
    assert await conf.row(running.id) != {}
    for job_id in (*ids[1:], deduped):
        assert await conf.row(job_id) == {}
    assert not await conf.exists(conf.keys.prefix + "de:o-1")
    assert await whole_queue.drain_queue(conf.queue, scheduled=True) == 1
    assert await conf.row(later) == {}


async def test_the_commands_from_the_shell(redis_url: str, conf: Harness) -> None:
    await conf.enqueue_many(2)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, [*args, conf.queue.name, "--redis-url", redis_url])
        return result.exit_code, result.output

    code, out = await anyio.to_thread.run_sync(lambda: run("obliterate", "--yes"))
    assert (code, "not paused" in out) == (1, True)
    code, out = await anyio.to_thread.run_sync(lambda: run("drain", "--yes"))
    assert (code, out.strip()) == (0, f"drained 2 job(s) from queue {conf.queue.name!r}")
    await conf.queue.pause()
    code, out = await anyio.to_thread.run_sync(lambda: run("obliterate", "--yes"))
    assert code == 0, out
    assert out.startswith(f"obliterated queue {conf.queue.name!r}: 0 job(s)")
    assert await keys_left(conf.client, conf.keys.prefix) == set()
