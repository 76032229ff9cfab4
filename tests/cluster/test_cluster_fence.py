"""The cluster fence after its first verdict: a rebuilt slot map re-checks `{emq}:version` in the
background; commands go on under the last verdict until the key's node answers otherwise. (That
an unreachable key's node holds nothing back: test_cluster_fault_scope.py.)"""

from __future__ import annotations

from emq_worker.errors import VersionFenceError
from emq_worker.protocol.keys import VERSION_KEY, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.cluster import FencedCluster
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
