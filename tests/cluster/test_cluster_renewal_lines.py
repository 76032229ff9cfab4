"""On a `redis+cluster://` URL the renewals go on the worker's own cluster clients (one per
renewal line) and keep every lease, on every primary, while the handlers run past a lease."""

from __future__ import annotations

import asyncio
import functools
import os
import time

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from emq_worker import App, JobContext, Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.renewal_lines import RenewalLines
from emq_worker.valkey.connection import connect
from tests.cluster.conftest import connected, spread_queues
from tests.support.cluster import ClusterOfServers
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until


async def test_renewal_lines_on_a_cluster_keep_leases_on_every_primary(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    queues = tuple(spread_queues(cluster, f"lines{os.getpid()}", per_node=1))
    started: list[str] = []
    release = anyio.Event()
    app = App()

    @app.task
    async def held(ctx: JobContext) -> None:
        started.append(ctx.queue)
        await release.wait()

    producer = Producer(cluster_client)
    for queue in queues:
        await producer.enqueue(queue, "held")
    # A lease is kept through a stall of the worker's loop of up to lease - renew interval - stop
    # margin: 1.85 s here (at a 900 ms lease, a 0.7 s stall of a loaded machine self-fenced).
    options = worker_settings(
        queues, cluster.url, lease_ms=3_000, renew_every_ms=1_000, beat_ms=100
    )
    with anyio.fail_after(30):
        async with running_worker(options, app) as worker:
            await until(lambda: len(started) == len(queues), what="a job held on each queue")
            sweeps = worker.counters.renew_sweeps
            # Two leases' worth of renewals, one call per queue per tick.
            await until(
                lambda: worker.counters.renew_sweeps >= sweeps + 6 * len(queues),
                what="renewals for two leases",
            )
            held_counters = worker.counters.snapshot()
            release.set()
            await until(lambda: worker.counters.completed == len(queues), what="all completed")
    assert held_counters["self_fenced"] == held_counters["leases_lost"] == 0, held_counters
    assert held_counters["renew_failures"] == 0, held_counters
    assert held_counters["reaped"] == 0, held_counters


async def test_a_stall_as_the_lines_close_leaves_no_line_open(
    cluster: ClusterOfServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py gives up closing a connection whose close is not seen within its connect timeout
    (a line's is short: half a renewal interval), raising after a stall of the loop that long on
    a loaded machine (0.7 s met in CI); the close of every other line must go on regardless."""
    dial = functools.partial(
        connect, cluster.url, DEFAULT_WIRE_VERSION, connect_timeout_s=0.1, max_connections=1
    )
    lines = RenewalLines(dial, Scripts(), most=3, warm=3)
    clients = []
    with lines.idle() as one, lines.idle() as two, lines.idle() as three:
        for line in (one, two, three):
            assert line is not None
            await line.client.ping()
            clients.append(line.client)
    close = asyncio.StreamWriter.close

    def stalled_close(writer: asyncio.StreamWriter) -> None:
        close(writer)
        monkeypatch.setattr(asyncio.StreamWriter, "close", close)  # one stall is enough
        time.sleep(0.2)  # the loop stalls past the 0.1 s connect timeout

    monkeypatch.setattr(asyncio.StreamWriter, "close", stalled_close)
    with anyio.fail_after(10):
        await lines.aclose()
    assert [connected(as_cluster) for as_cluster in map(cluster_of, clients)] == [0, 0, 0]


def cluster_of(client: Redis) -> RedisCluster:
    assert isinstance(client, RedisCluster)
    return client
