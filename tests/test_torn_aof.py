"""A claim whose AOF record a crash tore (redis-server SIGKILLed during the write) loses no job
over the restarts that follow.

redis-server 7.0 with aof-load-truncated (the default) cuts such an AOF after its last whole
command, which is inside the claim's MULTI/EXEC block. The first load is right (the claim never
happened, and its caller never had a reply), but the block's MULTI and whole commands stay at the
end of the file, and the next load applies them with the transaction written after them. Those
commands must touch only the jobs the torn claim named, and leave each of them where a claim or
the reaper finds it. (A ZPOPMIN among them pops whatever pending holds then: the next jobs in
line, named by no one, left in no set.)
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion, HeldLease, NewJob
from emq_worker.valkey.connection import connect
from tests.support.server import RedisServer, last_transaction_commands, tear_last_transaction

pytestmark = pytest.mark.fault

JOBS = 6
TORN = 3
"""Jobs the torn claim leases (the first TORN of JOBS)."""
LEASE_MS = 100
"""The torn claim's lease: long over when the jobs it named are looked for."""
LONG_LEASE_MS = 60_000
DRAIN_WITHIN_S = 10.0
MAX_ATTEMPTS = 20


def client_of(server: RedisServer) -> Redis:
    """A client that waits out the restarts (nothing strikes a command while it runs)."""
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.02), 20)
    return connect(server.url, DEFAULT_WIRE_VERSION, retry=retry)


def leases(jobs: tuple[ClaimedJob, ...]) -> list[Completion]:
    return [Completion(HeldLease(job.id, job.token, job.nonce)) for job in jobs]


async def drain(queue: Queue) -> None:
    """Claim and complete until nothing is pending or active, reaping expired leases on the way
    (the torn claim's commands may have scored jobs in active at its own, expired, deadline)."""
    with anyio.fail_after(DRAIN_WITHIN_S):
        while True:
            await queue.reap(100, MAX_ATTEMPTS)
            claimed = await queue.claim(10, LONG_LEASE_MS)
            if claimed.jobs:
                await queue.settle(leases(claimed.jobs), LONG_LEASE_MS)
                continue
            counts = await queue.counts()
            if counts.pending == counts.active == 0:
                return
            await anyio.sleep(LEASE_MS / 1000)


async def torn_round(server: RedisServer, keep: int, then: str) -> int:
    """One queue through a torn claim and two restarts; returns how many commands the claim's
    MULTI/EXEC block holds."""
    client = client_of(server)
    try:
        queue = Queue(client, Scripts(), f"torn.{then.replace(' ', '-')}.{keep}")
        ids = [JobId(f"JOB{keep:02d}x{n:02d}") for n in range(JOBS)]
        await queue.enqueue([NewJob(job, b'{"t":"work"}') for job in ids])
        torn = await queue.claim(TORN, LEASE_MS)
        assert [job.id for job in torn.jobs] == ids[:TORN]
        server.kill()
        commands = last_transaction_commands(server.directory)
        tear_last_transaction(server.directory, keep)
        server.start()
        assert (await queue.counts()).pending == JOBS, "the first load leaves the claim out"
        if then == "claimed again":
            again = await queue.claim(TORN, LONG_LEASE_MS)
            assert [job.id for job in again.jobs] == ids[:TORN]
            await queue.settle(leases(again.jobs), LONG_LEASE_MS)
        else:
            ids.append(JobId(f"JOB{keep:02d}x{JOBS:02d}"))
            await queue.enqueue([NewJob(ids[-1], b'{"t":"work"}')])
        server.restart(crash=True)
        where = {job: await queue.state_of(job) for job in ids}
        assert [job for job, state in where.items() if state == "unknown"] == [], where
        await drain(queue)
        counts = await queue.counts()
        assert counts.completed == len(ids), (keep, counts, where)
        assert [job for job in ids if await queue.get_job(job) is not None] == []
        return commands
    finally:
        await client.aclose()


@pytest.mark.parametrize("then", ["claimed again", "left pending"])
async def test_a_claim_torn_anywhere_in_the_aof_loses_no_job_over_two_restarts(
    tmp_path: Path, then: str
) -> None:
    """The claim's record is torn after each of its whole commands in turn (EXEC is always
    lost); after the first restart its jobs are claimed and completed again, or left pending
    while another transaction is written; after the second, every job is still found."""
    with RedisServer(tmp_path / "r", appendonly=True) as server:
        keep, commands = 1, 2
        while keep < commands:
            commands = await torn_round(server, keep, then)
            keep += 1
    assert commands > 3, "the claim wrote fewer commands than it leased jobs"
