"""The cluster client: URL validation, slot routing of scripts, NOSCRIPT per node, the version
fence through the cluster, the park across slots, and renewal sweeps that overlap."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, TryAgainError
from redis.utils import HIREDIS_AVAILABLE

from emq_worker.errors import ConfigError, VersionFenceError
from emq_worker.jobs.producer import JobSpec, Producer
from emq_worker.observe.clock import MonotonicClock
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.keys import QueueKeys, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, LostLease, SettleStatus
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import RENEW_CHUNK, HeldLease
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.lease import Lease, LeaseBook
from emq_worker.runtime.renewal import RenewalSweep
from emq_worker.runtime.state import StopSignal, WorkerState
from emq_worker.runtime.wakes import WakeWaiter
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.cluster import ClusterUnavailableError, FencedCluster, is_moving
from emq_worker.valkey.connection import connect, redacted, validate_url
from emq_worker.valkey.credentials import PASSWORD_FILE_ENV, with_password
from tests.cluster.conftest import spread_queues
from tests.support.cluster import ClusterOfServers
from tests.support.wait import eventually


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis+cluster://10.0.0.1", "'10.0.0.1'"),
        ("redis+cluster://10.0.0.1:7000,10.0.0.2:http", "'10.0.0.2:http'"),
        ("redis+cluster://10.0.0.1:7000,", "''"),
        ("redis+cluster://10.0.0.1:99999", "'10.0.0.1:99999'"),
        ("redis+cluster://10.0.0.1:7000/3", "'/3'"),
        ("redis+cluster://10.0.0.1:7000?db=2", "'db'"),
        ("cluster://10.0.0.1:7000", "'cluster'"),
    ],
)
def test_a_bad_cluster_url_is_refused_naming_the_bad_part(url: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("?", r"\?")):
        WorkerSettings(queues=("q",), redis_url=url)


def test_a_cluster_url_names_every_seed_and_keeps_the_password_out_of_errors() -> None:
    address = RedisAddress.parse("rediss+cluster://app:s3cret@a:7000,[::1]:7001,b:7002").cluster
    assert address is not None
    assert address.seeds == (("a", 7000), ("::1", 7001), ("b", 7002))
    assert (address.username, address.password, address.tls) == ("app", "s3cret", True)
    with pytest.raises(ConfigError) as refused:
        RedisAddress.parse("redis+cluster://app:s3cret@a:7000,b")
    assert "s3cret" not in str(refused.value)


def test_an_ipv6_seed_after_another_passes_every_url_helper(tmp_path: Path) -> None:
    """urllib's urlsplit refuses `a:7000,[::1]:7001` ("Invalid IPv6 URL") on Debian's Python
    3.11.2: validating, redacting and adding a password must not use it."""
    url = "rediss+cluster://app:s3cret@a:7000,[::1]:7001"
    assert validate_url(url) == url
    assert redacted(url) == "rediss+cluster://app:***@a:7000,[::1]:7001"
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    bare = "rediss+cluster://app@a:7000,[::1]:7001"
    assert with_password(bare, {PASSWORD_FILE_ENV: str(secret)}, tmp_path / "none") == url


async def test_each_queue_lives_on_the_primary_owning_its_slot(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    queues = spread_queues(cluster, "routing")
    assert sorted(set(queues.values())) == cluster.primary_ports()
    producer = Producer(cluster_client)
    for name in queues:
        await producer.enqueue(name, "noop")
    for name, port in queues.items():
        pending = QueueKeys.of(name).pending
        for node_port in cluster.primary_ports():
            with cluster.node(node_port).client() as direct:
                holds = direct.execute_command("CLUSTER", "COUNTKEYSINSLOT", hash_slot(pending))
                assert (holds > 0) == (node_port == port), (name, node_port)


async def test_a_node_that_never_saw_script_load_gets_the_script_on_noscript(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    queues = spread_queues(cluster, "noscript", per_node=1)
    scripts = Scripts()
    await scripts.load_all(cluster_client)
    for port in cluster.primary_ports():
        with cluster.node(port).client() as direct:
            direct.script_flush()
    for name in queues:
        queue = Queue(cluster_client, scripts, name)
        await Producer(cluster_client).enqueue(name, "noop")
        claimed = await queue.claim(5, 30_000)
        assert len(claimed.jobs) == 1
        for port in cluster.primary_ports():  # the pipelined path (renew) recovers too
            with cluster.node(port).client() as direct:
                direct.script_flush()
        lost = await queue.renew([_held(claimed.jobs[0])], 30_000)
        assert lost == []


async def test_the_version_fence_reads_through_the_cluster_and_refuses_a_mismatch(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    assert await cluster_client.get("{emq}:version") == DEFAULT_WIRE_VERSION.encode()
    other = connect(cluster.url, "999")
    try:
        with pytest.raises(VersionFenceError):
            await other.ping()
    finally:
        await other.aclose()


async def test_the_fence_runs_again_after_the_client_drops_its_connections(
    cluster: ClusterOfServers,
) -> None:
    client = connect(cluster.url, DEFAULT_WIRE_VERSION)
    assert isinstance(client, FencedCluster)
    try:
        await client.ping()
        assert client.fence_checks == 1
        await client.ping()
        assert client.fence_checks == 1
        await client.aclose()  # the caller's own close: the next use fences again, awaited
        await client.ping()
        assert client.fence_checks == 2
    finally:
        await client.aclose()


def test_moving_cluster_errors_are_retryable_connection_errors() -> None:
    assert is_moving(TryAgainError("Multiple keys request during rehashing of slot"))
    assert is_moving(ResponseError("Script attempted to access a non local key in a cluster node"))
    assert not is_moving(ResponseError("EMQSTATE nope"))
    assert issubclass(ClusterUnavailableError, RedisConnectionError)


async def test_a_park_over_queues_on_every_node_wakes_on_any_of_them(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    queues = list(spread_queues(cluster, "park"))
    wake_keys = [QueueKeys.of(name).wake for name in queues]
    await cluster_client.delete(*wake_keys)
    waiter = WakeWaiter(cluster_client)
    woken: list[tuple[str, bytes] | None] = []

    async def park() -> None:
        woken.append(await waiter.wait(wake_keys, 60.0))

    for name in (queues[0], queues[-1]):
        woken.clear()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(park)
            await _until_blocked(cluster, len(queues))
            await cluster_client.lpush(QueueKeys.of(name).wake, "1")
        assert woken == [(QueueKeys.of(name).wake, b"1")], name
    # The connections of the cancelled BLPOPs are usable again: a quiet park just times out.
    assert await waiter.wait(wake_keys, 0.05) is None


async def test_one_renewal_tick_sends_every_queue_before_any_reply(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    names = list(spread_queues(cluster, "renew"))
    scripts = Scripts()
    queues = {name: Queue(cluster_client, scripts, name) for name in names}
    book, settings = LeaseBook(), WorkerSettings(queues=tuple(names), lease_ms=30_000)
    clock = MonotonicClock()
    producer = Producer(cluster_client)
    for name, queue in queues.items():
        await producer.enqueue(name, "noop")
        for job in (await queue.claim(1, settings.lease_ms)).jobs:
            book.add(Lease(job=job, confirmed_at=clock.monotonic()))
    in_flight, most = 0, 0
    everyone_sent = anyio.Event()

    def overlapping(queue: Queue) -> None:
        renew = queue.renew

        async def counted(leases: Sequence[HeldLease], lease_ms: int) -> list[LostLease]:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            if in_flight == len(queues):
                everyone_sent.set()
            with anyio.fail_after(10):
                await everyone_sent.wait()  # a sweep that waited for each reply would hang here
            try:
                return await renew(leases, lease_ms)
            finally:
                in_flight -= 1

        queue.renew = counted  # type: ignore[method-assign]

    for queue in queues.values():
        overlapping(queue)
    state = WorkerState(settings, queues, Counters(), clock, random.Random(0), StopSignal(), book)
    sweep = RenewalSweep(state)
    await sweep.tick()
    assert most == len(names) == 6
    assert sweep.state.counters.renew_sweeps == 6


async def _until_blocked(cluster: ClusterOfServers, count: int) -> None:
    """Poll until `count` clients are blocked across the primaries (the park is in place)."""

    async def probe() -> bool:
        blocked = 0
        for port in cluster.primary_ports():
            with cluster.node(port).client() as direct:
                blocked += int(direct.info("clients")["blocked_clients"])
        return blocked >= count

    await eventually(probe, timeout=20, what=f"{count} blocked BLPOPs")


def _held(job: ClaimedJob) -> HeldLease:
    return HeldLease(job.id, job.token, job.nonce)


class _OneNodeDown:
    """A stand-in client: BLPOPs on `down` fail as a refused connection, others block."""

    def __init__(self, down: str) -> None:
        self.down = down

    async def blpop(self, keys: list[str], timeout: float) -> None:  # noqa: ASYNC109 (redis-py)
        if self.down in keys:
            raise RedisConnectionError("Error 111 connecting: Connection refused.")
        await anyio.sleep(timeout)


async def test_a_park_raises_a_lost_node_as_a_connection_error_not_a_group() -> None:
    keys = [QueueKeys.of(f"down.{n}").wake for n in range(4)]
    waiter = WakeWaiter(_OneNodeDown(keys[2]))  # type: ignore[arg-type]
    waiter.clustered = True
    with pytest.raises(RedisConnectionError, match="refused"):
        await waiter.wait(keys, 30.0)


async def test_node_connections_pack_commands_with_hiredis_like_a_single_server(
    cluster_client: Redis,
) -> None:
    assert isinstance(cluster_client, RedisCluster)
    await cluster_client.ping()
    classes = {node.connection_class.__name__ for node in cluster_client.get_primaries()}
    expected = "HiredisPackedConnection" if HIREDIS_AVAILABLE else "Connection"
    assert classes == {expected}


async def test_scripts_and_the_renewal_pipeline_follow_ask_then_moved(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    """Renewing more than RENEW_CHUNK leases is a pipeline of EVALSHAs; fewer, one EVALSHA."""
    name = next(iter(spread_queues(cluster, f"redirect{os.getpid()}", per_node=1)))
    queue = Queue(cluster_client, Scripts(), name)
    await Producer(cluster_client).enqueue_many(name, [JobSpec("noop")] * 100)
    held = [_held(job) for job in (await queue.claim(RENEW_CHUNK + 10, 30_000)).jobs]
    few = held[:5]
    other = connect(cluster.url, DEFAULT_WIRE_VERSION)  # a second client with the old slot map
    try:
        assert await Queue(other, Scripts(), name).renew(few, 30_000) == []
        slot = hash_slot(queue.keys.pending)
        target = next(p for p in cluster.primary_ports() if p != cluster.owner_port(slot))
        move = await anyio.to_thread.run_sync(cluster.begin_move, slot, target)
        assert await anyio.to_thread.run_sync(move.migrate, 1000) > 100
        # Every key is on the target, the slot still belongs to the source: ASK. A script naming
        # a key that exists on neither node (no cancel set yet) gets TRYAGAIN until the move
        # ends: the worker sees a retryable error.
        with pytest.raises(ClusterUnavailableError):
            await queue.renew(held, 30_000)
        with pytest.raises(ClusterUnavailableError):
            await queue.claim(5, 30_000)
        # Once every key it names exists (renew: active, cancel), it runs on the target via ASK,
        # on a client with many idle connections per node (the park made them).
        await cluster_client.sadd(queue.keys.cancel, "JOB-not-running")  # a write follows ASK
        await WakeWaiter(cluster_client).wait([QueueKeys.of(n).wake for n in "abcdef"], 0.01)
        assert await queue.renew(held, 30_000) == []
        assert await queue.renew(few, 30_000) == []
        await anyio.to_thread.run_sync(move.finish)
        # Both clients' slot maps still name the source: MOVED, for a pipeline and a single call.
        assert await queue.renew(held, 30_000) == []
        assert await Queue(other, Scripts(), name).renew(few, 30_000) == []
    finally:
        await other.aclose()
    held += [_held(job) for job in (await queue.claim(10, 30_000)).jobs]
    assert len(held) == RENEW_CHUNK + 20
    for lease in held:
        assert (await queue.complete(lease, 60_000)).status == SettleStatus.OK
    counts = await queue.counts()
    assert (counts.pending, counts.active) == (100 - len(held), 0)


async def test_a_node_closing_its_idle_connections_hands_none_of_them_out_meanwhile(
    cluster_client: Redis,
) -> None:
    """redis-py 8.1 closes a node's idle connections (disconnect_free_connections: after a
    command on that node met a lost connection, or the node left the slot map) while they stay
    in the pool: a command that takes one meanwhile wrote on a socket being closed under it,
    raising `AttributeError: 'NoneType' object has no attribute 'writelines'` (asyncio) or
    uvloop's `RuntimeError: ... the handler is closed`, which no caller retries: it killed a
    worker at a primary's failover. The idle connections closed are out of the pool meanwhile."""
    client = cluster_client
    assert isinstance(client, FencedCluster)
    key = "{closing}:idle"
    await client.set(key, "v")  # leaves a connected connection idle on the key's node
    node = client.nodes_manager.get_node_from_slot(hash_slot(key))
    for _ in range(3):  # each round: the connection closed by the previous one is idle again
        closing = asyncio.create_task(node.disconnect_free_connections())
        # One scheduling step: the close has listed the idle connections and scheduled their
        # disconnects, not yet run (the window in which redis-py handed them out).
        await asyncio.sleep(0)
        connection = node.acquire_connection()
        try:
            await connection.send_command("GET", key)
            assert await connection.read_response() == b"v"
        finally:
            node.release(connection)
        await closing
        assert await client.get(key) == b"v"


@pytest.mark.parametrize("server", ["cluster", "redis_url"])
def test_a_write_on_a_connection_reset_under_it_is_a_connection_error_on_uvloop(
    server: str, request: pytest.FixtureRequest
) -> None:
    """uvloop closes a transport at once when the peer resets it (a primary SIGKILLed just as
    a connection to it opened, or while one was idle), and a later write on it raises
    `RuntimeError: unable to perform operation on <TCPTransport closed=True ...>; the handler
    is closed`, not the OSError redis-py turns into a ConnectionError: no retry or scoping
    applied, and a worker at a primary's failover exited (its claim or settle raised it). The
    worker runs on uvloop (runtime/daemon.py), so this test does too."""
    uvloop = pytest.importorskip("uvloop")
    target = request.getfixturevalue(server)
    url = target.url if isinstance(target, ClusterOfServers) else str(target)
    key = "{reset}:under"

    async def write_after_reset() -> None:
        client = connect(url, DEFAULT_WIRE_VERSION)
        try:
            await client.set(key, "v")
            if isinstance(client, RedisCluster):
                node = client.nodes_manager.get_node_from_slot(hash_slot(key))
                connection = node.acquire_connection()
            else:
                connection = await client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await connection.connect()
                # What a peer's reset does to uvloop's transport: closed, the handle gone.
                connection._writer.transport.abort()
                with pytest.raises(RedisConnectionError):
                    await connection.send_command("GET", key)
            finally:
                if isinstance(client, RedisCluster):
                    node.release(connection)
                else:
                    await client.connection_pool.release(connection)
            assert await client.get(key) == b"v"  # the connection reopens on its next use
        finally:
            await client.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(write_after_reset())
