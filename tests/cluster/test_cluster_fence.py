"""The cluster fence after its first verdict: a rebuilt slot map re-checks `{emq}:version` in the
background; commands go on under the last verdict until the key's node answers otherwise. (That
an unreachable key's node holds nothing back: test_cluster_fault_scope.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from emq_worker.errors import VersionFenceError
from emq_worker.protocol.keys import VERSION_KEY, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.cluster import ClusterUnavailableError, FencedCluster, _FencedNode
from emq_worker.valkey.connection import connect
from tests.support.cluster import ClusterOfServers
from tests.support.wait import eventually


async def test_a_rebuild_rechecks_the_fence_and_a_changed_version_refuses(
    cluster: ClusterOfServers,
) -> None:
    client = connect(cluster.url, DEFAULT_WIRE_VERSION)
    assert isinstance(client, FencedCluster)
    owner = cluster.node(cluster.owner_port(hash_slot(VERSION_KEY)))
    try:
        await client.ping()
        with owner.client() as direct:
            direct.set(VERSION_KEY, "999")  # an incompatible deployment took the keyspace

        async def refused() -> bool:
            client.rediscover()  # what a lost node, a failover or CLUSTERDOWN leads to
            try:
                await client.ping()
            except VersionFenceError:
                return True
            return False

        await eventually(refused, timeout=10, what="the re-check to refuse version '999'")
        assert client.fence.refused is not None
        assert client.fence.refused.found == "999"
    finally:
        with owner.client() as direct:
            direct.set(VERSION_KEY, DEFAULT_WIRE_VERSION)
        await client.aclose()


async def test_a_first_fence_that_cannot_read_the_key_fails_at_once_and_runs_again(
    cluster: ClusterOfServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first fence's read of `{emq}:version` failing (its primary killed, no replica leading
    yet) failed redis-py's retry of that read, which rebuilt the slot map, which fenced again
    (nested in the first), whose read failed... : a client first used then held its command,
    to any node, until the failover (1.6 s and 137 nested reads, measured), and with the key's
    node gone longer, until a RecursionError. Now the first fence fails at once, as a lost node
    (retried by the caller as any), and runs again on the next command: none goes out unfenced."""
    read = _FencedNode.execute_command

    async def unreachable_key(node: _FencedNode, *args: Any, **kwargs: Any) -> Any:
        if args == ("GET", VERSION_KEY):
            raise RedisConnectionError(f"Error 111 connecting to {node.name}. Connection refused.")
        return await read(node, *args, **kwargs)

    client = connect(cluster.url, DEFAULT_WIRE_VERSION)
    assert isinstance(client, FencedCluster)
    try:
        monkeypatch.setattr(_FencedNode, "execute_command", unreachable_key)
        with pytest.raises(ClusterUnavailableError):
            await client.get("{fence}:first")
        assert client.fence_checks == 1
        assert not client.fence.passed
        with pytest.raises(ClusterUnavailableError):  # still unfenced: no command goes out
            await client.get("{fence}:first")
        assert client.fence_checks == 2
        monkeypatch.undo()  # the key's node leads again
        assert await client.get("{fence}:first") is None
        assert client.fence_checks == 3
        assert client.fence.passed
    finally:
        await client.aclose()
