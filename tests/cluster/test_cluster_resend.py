"""One acknowledged enqueue creates one job on a cluster, with client connections killed while
enqueues run: the cluster client re-sends a call whose reply the kill cut, and the re-send must
be answered as the first copy was (its memo), never taken for another producer's id collision."""

from __future__ import annotations

import contextlib
from typing import cast

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.jobs.producer import JobSpec, Producer
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.keys import QueueKeys, hash_slot
from emq_worker.protocol.names import JobId
from tests.support.cluster import ClusterOfServers

CALLS = 1_000
BURST = 4
KILL_EVERY_S = 0.002
"""The fault's cadence: often enough that some kills land between a call and its reply."""


async def _kill_clients(killer: Redis, done: anyio.Event) -> int:
    killed = 0
    while not done.is_set():
        with contextlib.suppress(ResponseError):  # no client to kill this time
            killed += int(await killer.client_kill_filter(_type="normal", skipme=True))
        await anyio.sleep(KILL_EVERY_S)
    return killed


class RecordingMinter(SnowflakeMinter):
    """Notes every id it mints, so a test knows the ids a call minted but did not return."""

    def __init__(self) -> None:
        super().__init__(1000)
        self.minted: list[JobId] = []

    def job_ids(self, count: int) -> list[JobId]:
        ids = super().job_ids(count)
        self.minted += ids
        return ids

    def job_id(self) -> JobId:
        new = super().job_id()
        self.minted.append(new)
        return new


@pytest.mark.fault
@pytest.mark.timeout(120)
async def test_killed_connections_never_turn_one_enqueue_into_two_jobs(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    queue = "resend.killed"
    keys = QueueKeys.of(queue)
    killer = Redis(port=cluster.owner_port(hash_slot(keys.pending)))
    producer = Producer(cluster_client)
    minter = producer.minter = RecordingMinter()
    acknowledged: set[str] = set()
    dropped: set[str] = set()  # ids an acknowledged call minted, then replaced by a new mint
    unknown = 0  # calls that raised: their jobs may or may not exist
    done = anyio.Event()
    killed: list[int] = []

    async def kill() -> None:
        killed.append(await _kill_clients(killer, done))

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(kill)
            for _ in range(CALLS):
                minter.minted.clear()
                try:
                    results = await producer.enqueue_many(queue, [JobSpec("work")] * BURST)
                except (RedisConnectionError, RedisTimeoutError):
                    unknown += 1
                    continue
                returned = {str(r.job_id) for r in results}
                acknowledged |= returned
                dropped |= set(minter.minted) - returned
            done.set()
    finally:
        await killer.aclose()
    print({"killed": killed[0], "unknown": unknown, "reminted": len(dropped)})
    assert killed[0] > 0
    members = cast(list[bytes], await cluster_client.zrange(keys.pending, 0, -1))
    pending = {m.decode() for m in members}
    assert acknowledged <= pending
    # The bug: a re-sent call answered 0 for the ids its first copy wrote, and the producer
    # minted others, leaving two jobs for one acknowledged enqueue.
    twice = sorted(dropped & pending)
    assert twice == [], (len(twice), twice[:5])
