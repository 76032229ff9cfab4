"""Hostile or broken data in Redis and on the command line. Each gets a clear error, or a
dead-letter with its reason; the worker never crashes or spins, and nothing else is lost.

Already covered elsewhere (not repeated): an unknown task, `\\xff not json`, kwargs that do not
fit (test_worker_behaviour.py); a pending id whose row is gone and a row without a payload
(test_conformance.py, phantoms); another `{emq}:version` (test_faults.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from click.testing import CliRunner
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker import App, JobContext, Producer
from emq_worker.cli.main import main
from emq_worker.errors import PayloadError
from emq_worker.jobs import codec
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.payload_limits import MAX_PAYLOAD_BYTES
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts, read_source
from emq_worker.protocol.values import NewJob
from emq_worker.valkey.connection import connect
from tests.chaos.faults import Fleet, enqueue, wait_drained
from tests.chaos.rows import stage
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until

MINTER = SnowflakeMinter(1001)
GOOD = b'{"task":"work","kwargs":{}}'
WRITE_ROW = "redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', "
BIG_ROW = (
    WRITE_ROW + "string.rep('x', tonumber(ARGV[1]))) return redis.call('ZADD', KEYS[2], 0, ARGV[2])"
)


def _id() -> JobId:
    return MINTER.job_id()


async def _bad_rows(client: Redis, keys: QueueKeys) -> dict[str, str]:
    """Rows that cannot become jobs, each in pending: id -> the last_error it must get."""
    not_integer, a_string, no_payload, too_big = _id(), _id(), _id(), _id()
    await client.hset(keys.job(not_integer), mapping={"payload": GOOD, "attempts": "abc"})
    await client.set(keys.job(a_string), "not a hash")
    await client.hset(keys.job(no_payload), mapping={"state": "pending", "attempts": "0"})
    await client.eval(BIG_ROW, 2, keys.job(too_big), keys.pending, MAX_PAYLOAD_BYTES + 1, too_big)
    await client.zadd(keys.pending, {not_integer: 0, a_string: 0, no_payload: 0})
    return {
        not_integer: "attempts is not an integer: abc",
        no_payload: "row has no payload",
        too_big: f"payload is {MAX_PAYLOAD_BYTES + 1} bytes, over the limit of {MAX_PAYLOAD_BYTES}",
        a_string: "",  # not a hash: dead-lettered, no row fields to write
    }


async def test_rows_that_cannot_become_jobs_are_dead_lettered_and_never_strand_the_batch(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    """One script error after ZPOPMIN would strand every job popped before it, in no set at all
    (attempts="abc" did, before claim.lua read it with pcall)."""
    queue = Queue(client, scripts, queue_name)
    keys = queue.keys
    good = [_id() for _ in range(3)]
    await queue.enqueue([NewJob(good[0], GOOD)])
    bad = await _bad_rows(client, keys)
    await queue.enqueue([NewJob(job, GOOD) for job in good[1:]])
    missing_state = _id()  # only a payload: claimed at attempt 1
    await client.hset(keys.job(missing_state), "payload", GOOD)
    await client.zadd(keys.pending, {missing_state: 0})

    result = await queue.claim(50, 30_000)

    assert sorted(job.id for job in result.jobs) == sorted([*good, missing_state])
    assert {job.token for job in result.jobs} == {1}
    assert result.phantoms == len(bad)
    assert await client.zcard(keys.pending) == 0
    assert await client.zcard(keys.active) == len(good) + 1
    assert set(await _members(client, keys.dead)) == set(bad)
    for job, reason in bad.items():
        if reason:
            row = await client.hmget(keys.job(job), "state", "last_error")
            assert row == [b"dead", reason.encode()], job
    assert (
        await client.get(keys.job(next(iter(j for j, r in bad.items() if not r)))) == b"not a hash"
    )


def test_claim_lua_and_the_producer_agree_on_the_payload_limit() -> None:
    found = re.search(r"local LEASE_PAYLOAD_LIMIT = (\d+)", read_source("claim"))
    assert found
    assert int(found.group(1)) == MAX_PAYLOAD_BYTES


async def test_the_producer_refuses_a_payload_over_the_limit_naming_its_size(
    client: Redis, queue_name: str
) -> None:
    with pytest.raises(PayloadError, match=f"{MAX_PAYLOAD_BYTES + 1} bytes, over the limit"):
        await Producer(client).enqueue_raw(queue_name, b"x" * (MAX_PAYLOAD_BYTES + 1))
    assert await client.exists(QueueKeys.of(queue_name).pending) == 0


async def test_a_wrong_typed_active_set_refuses_the_claim_before_anything_is_popped(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    ids = [_id(), _id()]
    await queue.enqueue([NewJob(job, GOOD) for job in ids])
    await client.set(queue.keys.active, "oops")
    try:
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await queue.claim(10, 30_000)
        assert await client.zcard(queue.keys.pending) == 2
        assert [await client.hget(queue.keys.job(job), "attempts") for job in ids] == [b"0", b"0"]
    finally:  # the session's server is shared: the dashboard tests list every queue on it
        await client.delete(queue.keys.active)


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xfe{}", b'{"task": "work", "kwargs": {"s": "\xc3\x28"}}', b"[" * 100_000],
    ids=["not-utf8", "bad-utf8-inside", "nested-100000-deep"],
)
def test_undecodable_payloads_raise_payload_errors_with_either_parser(
    payload: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    for loads in (codec._loads, json.loads):  # orjson when installed, and the stdlib's
        monkeypatch.setattr(codec, "_loads", loads)
        with pytest.raises(PayloadError, match="payload is not JSON"):
            codec.decode(payload)


async def test_a_worker_dead_letters_undecodable_payloads_and_runs_the_rest(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    ran: list[str] = []
    app = App()

    @app.task
    async def work(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    producer = Producer(client)
    bad = [b"\xff\xfe{}", b"[" * 100_000, b'{"task": 5}', b"null"]
    for payload in bad:
        await producer.enqueue_raw(queue_name, payload)
    good = await producer.enqueue(queue_name, "work", {})
    async with running_worker(worker_settings(queue_name, redis_url), app) as worker:
        await until(lambda: worker.counters.dead_lettered == len(bad), what="the bad jobs dead")
        await until(lambda: worker.counters.completed == 1, what="the good job")
    assert ran == [good.job_id]
    keys = QueueKeys.of(queue_name)
    for member in await _members(client, keys.dead):
        error = await client.hget(keys.job(member), "last_error")
        assert error, member
        assert len(error) < 1000  # the reason, not the payload


async def test_a_wrong_typed_pending_key_makes_the_worker_back_off_then_resume(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    ran: list[str] = []
    app = App()

    @app.task
    async def work(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    keys = QueueKeys.of(queue_name)
    await client.set(keys.pending, "not a sorted set")
    with structlog.testing.capture_logs() as logs:
        async with running_worker(worker_settings(queue_name, redis_url), app):

            def refused() -> list[MutableMapping[str, Any]]:
                return [e for e in logs if "WRONGTYPE" in str(e.get("error"))]

            await until(lambda: len(refused()) >= 3, what="three backed-off tries", within=20)
            # the key is one queue's: that queue backs off on its own (see test_queue_isolation)
            assert {e["event"] for e in refused()} == {"queue_failed"}
            await client.delete(keys.pending)
            job = await Producer(client).enqueue(queue_name, "work", {})
            await until(lambda: ran == [job.job_id], what="the job after the key was fixed")


@pytest.mark.parametrize(
    "name", ["a}b", "{x}", "a:b", "*", "x" * 300, "a\nb", "emq"], ids=lambda n: repr(n)[:12]
)
def test_hostile_queue_names_are_refused_naming_them(name: str) -> None:
    shown = repr(name)[1:-1][:40]
    for args in (
        ["run", "--queue", name, "--app", "tests.chaos.app:app"],
        ["enqueue", "--queue", name, "work", "{}"],
    ):
        result = CliRunner().invoke(main, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
        assert result.exit_code == 2, (args, result.output)
        assert shown in result.output.replace("\\\\", "\\"), result.output
        assert "Traceback" not in result.output


def test_an_empty_queue_name_is_refused() -> None:
    result = CliRunner().invoke(
        main, ["run", "--queue", "", "--app", "tests.chaos.app:app", "--redis-url", "redis://h/0"]
    )
    assert result.exit_code == 2
    assert "at least one --queue" in result.output


@pytest.mark.fault
async def test_a_100_mb_payload_is_refused_by_its_size_and_the_worker_stays_small(
    tmp_path: Path,
) -> None:
    queue = "big"
    async with stage(tmp_path, appendonly=False, queue=queue) as (server, client, processes):
        keys = QueueKeys.of(queue)
        huge = _id()
        # Written once, waiting as long as it takes: the stage's client (5 s socket timeout,
        # 20 retries) re-sent this 100 MB script on a loaded machine, each copy queued behind
        # the last, until the test's 120 s ran out (Redis 7.0 at load 15).
        writer = connect(server.url, DEFAULT_WIRE_VERSION, socket_timeout_s=None)
        try:
            await writer.eval(BIG_ROW, 2, keys.job(huge), keys.pending, 100 * 1024 * 1024, huge)
        finally:
            await writer.aclose()
        fleet = Fleet(processes, queue, server.url, 1_000, 200)
        [worker] = await fleet.start(1)
        ids = await enqueue(client, queue, 5, "work")
        await wait_drained(client, queue, within_s=30)
        assert await client.zrange(keys.dead, 0, -1) == [huge.encode()]
        error = await client.hget(keys.job(huge), "last_error")
        assert error == f"payload is {100 * 1024 * 1024} bytes, over the limit of 16777216".encode()
        assert int(await client.hget(keys.completed, "count") or 0) == len(ids)
        peak_kb = _peak_rss_kb(worker.pid)
        print({"row": "100 MB payload", "worker_peak_rss_mb": round(peak_kb / 1024, 1)})
        assert peak_kb < 100 * 1024, "the worker read the 100 MB payload"
        assert worker.returncode is None


async def _members(client: Redis, key: str) -> list[str]:
    members = await client.zrange(key, 0, -1)
    return [member.decode() if isinstance(member, bytes) else str(member) for member in members]


def _peak_rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert found, status
    return int(found.group(1))
