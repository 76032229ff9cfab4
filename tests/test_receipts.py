"""What answers a re-send costs memory in proportion to the re-send window, not to throughput x a
minute: a claim batch's settle receipts share a few small hashes (`receipts:<id but its last
character>`), each living receipt_ms after its last write, and a re-sent settle still gets its
answer; a claim's memo lasts the drain's re-send window, not a lease."""

from __future__ import annotations

from typing import cast

import pytest
from redis.asyncio import Redis

from emq_worker import JobSpec, WorkerSettings
from emq_worker.protocol.replies import SettleResult, SettleStatus
from emq_worker.protocol.values import Completion
from tests.support.conformance import Harness, held

RECEIPT_MS = WorkerSettings(queues=("q",)).receipt_ms
BATCH = 100


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def receipt_keys(conf: Harness) -> list[str]:
    found = cast(list[bytes], await conf.client.keys(conf.keys.prefix + "*receipt*"))
    return sorted(key.decode() for key in found)


async def test_a_batch_of_receipts_shares_a_few_hashes_that_expire_after_the_window(
    conf: Harness,
) -> None:
    await conf.producer.enqueue_many(conf.queue.name, [JobSpec("t")] * BATCH)  # minted together
    jobs = await conf.claim(BATCH)
    results = await conf.queue.settle([Completion(held(job)) for job in jobs], RECEIPT_MS)
    assert {result.status for result in results} == {SettleStatus.OK}
    keys = await receipt_keys(conf)
    # One hash per run of ids that differ only in their last character: as many as the batch's
    # distinct id prefixes, which ids minted together mostly share.
    assert keys == sorted({conf.keys.receipt(job.id)[0] for job in jobs})
    assert len(keys) < len(jobs)
    for key in keys:
        assert 0 < await conf.client.pttl(key) <= RECEIPT_MS
    job = jobs[0]
    stored = await conf.client.hget(*conf.keys.receipt(job.id))
    assert stored == f"{job.token}:{job.nonce}:completed".encode()


async def test_a_re_sent_settle_is_answered_from_its_receipt(conf: Harness) -> None:
    await conf.enqueue_many(2)
    first, second = await conf.claim(2)
    await conf.complete(first)
    await conf.fail(second)
    assert await conf.complete(first) == SettleResult(SettleStatus.SETTLED, "completed")
    resent = await conf.fail(second)
    assert resent.status is SettleStatus.SETTLED


async def test_removing_a_job_forgets_its_receipt(conf: Harness) -> None:
    await conf.enqueue_many(2)
    kept, dropped = await conf.claim(2)
    await conf.fail(kept, max_attempts=0)
    await conf.fail(dropped, max_attempts=0)
    assert await conf.queue.remove(dropped.id)
    assert await conf.client.hexists(*conf.keys.receipt(dropped.id)) == 0
    assert await conf.client.hexists(*conf.keys.receipt(kept.id)) == 1


async def test_a_claims_memo_lasts_the_re_send_window_not_the_lease(conf: Harness) -> None:
    """The memo answers a re-sent claim; the drain re-sends at the latest after its socket
    timeout, so a lease-long memo only held memory (about 2 KB per claim of 100 jobs)."""
    settings = WorkerSettings(queues=("q",))
    assert settings.claim_memo_ms == 16_000  # the socket timeout (beat + 10 s) and 5 s
    await conf.enqueue()
    nonce = "00000000000000aa"
    await conf.queue.claim(1, settings.lease_ms, nonce, memo_ms=settings.claim_memo_ms)
    assert 0 < await conf.client.pttl(conf.keys.claim_memo(nonce)) <= settings.claim_memo_ms
