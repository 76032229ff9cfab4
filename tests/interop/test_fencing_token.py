"""The fencing token a handler hands its own store (`JobContext.fencing_token`) climbs for a job
on every path that gives it to a new holder, ours and EchoMQ's alike: a reaped lease, a retry, a
hand-back, a withdrawn offer, EchoMQ's stalled sweep and its claim, a dead job reprocessed. Its
scope ends with the row: the same caller-chosen id enqueued again once the row is gone is a new
job counting from 1 (docs/how-to/fencing.md says so)."""

from __future__ import annotations

from emq_worker import JobContext
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.values import OfferTerms, new_nonce
from tests.interop.echomq import EchoMQ
from tests.support.conformance import RECEIPT_MS, Harness, held, lapse

SHORT_LEASE_MS = 100
MANY = 100
OFFER_MS = 10_000


def fencing_token(conf: Harness, job_id: str, token: int) -> int:
    """The token the runner's context would give a handler of this claim."""
    claimed = ClaimedJob(conf.queue.name, JobId(job_id), b"", Token(token), "")
    return JobContext(claimed, "t").fencing_token


async def ours(conf: Harness, job_id: JobId) -> ClaimedJob:
    job = await conf.claim_one(SHORT_LEASE_MS)
    assert job.id == job_id
    return job


def token_of(conf: Harness, job: ClaimedJob) -> int:
    return fencing_token(conf, job.id, job.token)


async def test_the_token_climbs_on_every_path_that_hands_the_job_to_a_new_holder(
    conf: Harness, emq: EchoMQ
) -> None:
    job_id = await conf.enqueue()
    seen = [token_of(conf, await ours(conf, job_id))]

    await lapse(SHORT_LEASE_MS + 30)  # our reaper returns the lapsed lease
    assert (await conf.queue.reap(MANY, MANY)).returned == 1
    job = await ours(conf, job_id)
    seen.append(token_of(conf, job))

    retried = await conf.fail(job, delay_ms=1, max_attempts=MANY)
    assert retried.detail == "scheduled", retried
    await lapse(20)  # past the retry's delay
    assert (await conf.queue.promote(MANY)).promoted == 1
    job = await ours(conf, job_id)
    seen.append(token_of(conf, job))

    assert await conf.queue.release([held(job)]) == 1  # a graceful stop hands it back
    seen.append(token_of(conf, await ours(conf, job_id)))

    await lapse(SHORT_LEASE_MS + 30)  # EchoMQ's stalled sweep returns it, then EchoMQ claims
    assert await emq.stalled(max_stalled=MANY) == ([job_id], [])
    claimed = await emq.claim(SHORT_LEASE_MS)
    assert claimed is not None
    seen.append(claimed.token)

    assert await emq.retry(job_id, claimed.token, delay_ms=0, max_attempts=1, error="x") == "dead"
    assert await conf.queue.reprocess(job_id)
    seen.append(token_of(conf, await ours(conf, job_id)))

    assert seen == sorted(set(seen)), f"the token went back or repeated: {seen}"
    assert seen == [1, 2, 3, 4, 5, 6]


async def test_a_job_handed_to_an_offer_and_withdrawn_counts_on_from_its_hand_off(
    conf: Harness,
) -> None:
    """An enqueue leases a job straight to a parked worker's offer (attempts 1); the worker's
    graceful stop withdraws it, and the next claim gets the next number."""
    offer = new_nonce()
    await conf.enqueue()  # a claim that empties pending leaves the offer
    first = await conf.queue.claim(10, SHORT_LEASE_MS, new_nonce(), OfferTerms(offer, OFFER_MS))
    assert first.offered
    job_id = await conf.enqueue()
    assert await conf.field(job_id, "attempts") == b"1"  # leased to the offer
    assert await conf.queue.withdraw(offer, SHORT_LEASE_MS) == 1
    assert token_of(conf, await ours(conf, job_id)) == 2


async def test_a_chosen_id_enqueued_again_after_its_row_is_gone_counts_from_one(
    conf: Harness,
) -> None:
    job_id = conf.mint()
    await conf.enqueue(job_id=job_id)
    first = await conf.claim_one(SHORT_LEASE_MS)
    await lapse(SHORT_LEASE_MS + 30)
    assert (await conf.queue.reap(MANY, MANY)).returned == 1
    second = await conf.claim_one(SHORT_LEASE_MS)
    assert (first.token, second.token) == (1, 2)
    completed = await conf.queue.complete(held(second), RECEIPT_MS, completed_ttl_ms=1)
    assert completed.detail == "completed", completed

    await lapse(20)  # past the 1 ms completion window
    assert not await conf.exists(f"{conf.keys.prefix}idem:{job_id}")
    await conf.enqueue(job_id=job_id)
    again = await conf.claim_one(SHORT_LEASE_MS)
    assert fencing_token(conf, again.id, again.token) == 1  # a new job: the store's scope
