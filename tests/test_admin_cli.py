"""The admin verbs an operator reaches for: stats, inspect, dead list|retry|purge, pause|resume,
remove. Driven through `emq-worker` with CliRunner; state is built through the Queue API."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
import redis
from click.testing import CliRunner, Result

from emq_worker.cli.main import main
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import HeldLease
from emq_worker.valkey.connection import connect
from tests.support.server import RedisServer

T = TypeVar("T")
LEASE_MS = 30_000
UNREACHABLE = "redis://127.0.0.1:1/0"


def cli(
    url: str, *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", url], input=input, env=env)


def on_queue(url: str, name: str, work: Callable[[Queue], Awaitable[T]]) -> T:
    """Run `work` on a Queue over a fresh client (the tests are sync: CliRunner runs anyio)."""

    async def go() -> T:
        client = connect(url, DEFAULT_WIRE_VERSION)
        try:
            return await work(Queue(client, Scripts(), name))
        finally:
            await client.aclose()

    return anyio.run(go)


async def enqueue(queue: Queue, delay_ms: int | None = None, **kwargs: Any) -> JobId:
    producer = Producer(queue.client)
    return (await producer.enqueue(queue.name, "charge", kwargs, delay_ms=delay_ms)).job_id


async def claim_one(queue: Queue) -> ClaimedJob:
    claimed = await queue.claim(1, LEASE_MS)
    assert len(claimed.jobs) == 1, claimed
    return claimed.jobs[0]


def lease_of(job: ClaimedJob) -> HeldLease:
    return HeldLease(job.id, job.token, job.nonce)


async def kill(queue: Queue, error: str = "boom") -> JobId:
    """Enqueue a job, claim it and fail it straight to dead."""
    await enqueue(queue)
    job = await claim_one(queue)
    await queue.fail(lease_of(job), 1000, delay_ms=0, max_attempts=0, error=error)
    return job.id


@dataclass(frozen=True)
class Populated:
    held: ClaimedJob
    dead: JobId
    pending: tuple[JobId, JobId]
    scheduled: JobId


async def populate(queue: Queue) -> Populated:
    """2 pending, 1 active, 1 scheduled, 1 dead; 1 completed, 1 failed."""
    await enqueue(queue)
    await queue.complete(lease_of(await claim_one(queue)), 1000)
    dead = await kill(queue, "card declined")
    await enqueue(queue, order_id="HELD")
    held = await claim_one(queue)
    pending = (await enqueue(queue, n=1), await enqueue(queue, n=2))
    scheduled = await enqueue(queue, delay_ms=600_000)
    return Populated(held, dead, pending, scheduled)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# --- stats --------------------------------------------------------------------------------

COUNTS = {"pending": 2, "active": 1, "scheduled": 1, "dead": 1, "completed": 1, "dead_lettered": 1}
ALIAS = {"failed": 1}
"""The JSON keeps dead_lettered's old name for scripts that read it."""


def test_stats_reports_depths_and_counters_as_json_and_as_a_table(
    redis_url: str, queue_name: str
) -> None:
    on_queue(redis_url, queue_name, populate)

    report = as_json(cli(redis_url, "stats", "--queue", queue_name, "--json"))
    assert report == {"queues": [{"queue": queue_name, "paused": False, **COUNTS, **ALIAS}]}

    table = cli(redis_url, "stats", "--queue", queue_name)
    assert table.exit_code == 0, table.output
    header, row = table.output.splitlines()
    assert header.split() == ["queue", "paused", *COUNTS]
    assert row.split() == [queue_name, "no", *(str(n) for n in COUNTS.values())]


def test_a_queue_with_a_wrong_typed_key_is_reported_and_the_others_still_list(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "r") as server:
        on_queue(server.url, "orders", populate)
        client = server.client()
        try:
            client.set("emq:{broken}:pending", "not a sorted set")
        finally:
            client.close()
        report = as_json(cli(server.url, "stats", "--json"))
        broken, orders = report["queues"]
        assert orders == {"queue": "orders", "paused": False, **COUNTS, **ALIAS}
        assert broken["queue"] == "broken"
        assert "WRONGTYPE" in broken["error"]
        table = cli(server.url, "stats")
        assert table.exit_code == 0, table.output
        assert "broken: cannot read its counts: WRONGTYPE" in table.output
        assert "orders" in table.output.splitlines()[1]


def test_stats_discovers_queues_by_a_bounded_scan_and_says_when_it_was_cut_short(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "r") as server:
        on_queue(server.url, "orders", populate)
        on_queue(server.url, "mail", kill)
        report = as_json(cli(server.url, "stats", "--json"))
        assert [q["queue"] for q in report["queues"]] == ["mail", "orders"]
        assert report["queues"][1] == {"queue": "orders", "paused": False, **COUNTS, **ALIAS}
        assert report["scan"]["complete"] is True

        # Far more keys than the scan budget (10 000 keys examined): the scan stops and says so.
        client = server.client()
        try:
            for start in range(0, 30_000, 5_000):
                client.mset({f"emq:{{bulk}}:job:{i}:x": "1" for i in range(start, start + 5_000)})
        finally:
            client.close()
        cut = cli(server.url, "stats")
        assert cut.exit_code == 0, cut.output
        assert "scan cut short" in cut.output
        assert "--queue" in cut.output
        assert as_json(cli(server.url, "stats", "--json"))["scan"]["complete"] is False


# --- inspect ------------------------------------------------------------------------------


def test_inspect_shows_a_pending_job_and_reads_the_queue_from_the_environment(
    redis_url: str, queue_name: str
) -> None:
    job_id = on_queue(redis_url, queue_name, lambda q: enqueue(q, order_id="A1"))
    result = cli(redis_url, "inspect", job_id, env={"EMQ_QUEUE": queue_name})
    assert result.exit_code == 0, result.output
    lines = dict(line.split(maxsplit=1) for line in result.output.splitlines())
    assert lines["job"] == job_id
    assert lines["where"] == "pending"
    assert lines["attempts"] == "0"
    assert lines["payload"] == '{"task":"charge","kwargs":{"order_id":"A1"}}'
    assert "lease" not in lines


def test_inspect_shows_an_active_jobs_lease_deadline_and_lock(
    redis_url: str, queue_name: str
) -> None:
    held = on_queue(redis_url, queue_name, populate).held
    job = as_json(cli(redis_url, "inspect", held.id, "--queue", queue_name, "--json"))
    assert job["where"] == "active"
    assert job["row"]["attempts"] == str(held.token)
    remaining = job["lease_deadline_ms"] - job["server_now_ms"]
    assert 0 < remaining <= LEASE_MS
    assert job["lock_value"] == f"{held.token}:{held.nonce}"
    assert 0 < job["lock_ttl_ms"] <= 2 * LEASE_MS

    text = cli(redis_url, "inspect", held.id, "--queue", queue_name).output
    assert "deadline" in text
    assert f"{held.token}:{held.nonce} (ttl" in text


def test_inspect_shows_a_dead_jobs_error_and_a_scheduled_jobs_time(
    redis_url: str, queue_name: str
) -> None:
    state = on_queue(redis_url, queue_name, populate)
    dead = as_json(cli(redis_url, "inspect", state.dead, "--queue", queue_name, "--json"))
    assert dead["where"] == "dead"
    assert dead["row"]["last_error"] == "card declined"
    assert dead["lock_value"] is None

    later = as_json(cli(redis_url, "inspect", state.scheduled, "--queue", queue_name, "--json"))
    assert later["where"] == "scheduled"
    assert 590_000 < later["scheduled_at_ms"] - later["server_now_ms"] <= 600_000
    assert "scheduled" in cli(redis_url, "inspect", state.scheduled, "-q", queue_name).output


def test_inspect_escapes_control_characters_and_truncates_a_long_payload(
    redis_url: str, queue_name: str
) -> None:
    payload = b"\x1b[2J\x07" + b"x" * 5000

    async def raw(queue: Queue) -> JobId:
        return (await Producer(queue.client).enqueue_raw(queue.name, payload)).job_id

    job_id = on_queue(redis_url, queue_name, raw)
    result = cli(redis_url, "inspect", job_id, "--queue", queue_name)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "\x07" not in result.output
    assert "\\x1b[2J\\x07xxx" in result.output
    assert "(5005 bytes in all)" in result.output
    assert len(result.output) < 2500

    job = as_json(cli(redis_url, "inspect", job_id, "--queue", queue_name, "--json"))
    assert job["payload_truncated"] is True
    assert job["payload_bytes"] == 5005


def test_inspect_of_an_absent_job_names_the_job_and_the_queue(
    redis_url: str, queue_name: str
) -> None:
    job_id = on_queue(redis_url, queue_name, kill)
    on_queue(redis_url, queue_name, lambda q: q.remove(job_id))
    result = cli(redis_url, "inspect", job_id, "--queue", queue_name)
    assert result.exit_code == 1
    assert f"no job {job_id} in queue {queue_name!r}" in result.output


# --- dead list | retry | purge ------------------------------------------------------------


async def three_dead(queue: Queue) -> list[JobId]:
    return [await kill(queue, f"error {i}") for i in range(3)]


def dead_ids(url: str, queue_name: str) -> list[str]:
    listing = as_json(cli(url, "dead", "list", "--queue", queue_name, "--json"))
    return [job["id"] for job in listing["jobs"]]


def test_dead_list_shows_dead_jobs_in_mint_order(redis_url: str, queue_name: str) -> None:
    ids = on_queue(redis_url, queue_name, three_dead)
    listing = as_json(cli(redis_url, "dead", "list", "-q", queue_name, "--limit", "2", "--json"))
    assert listing["total"] == 3
    assert listing["jobs"] == [
        {"id": ids[0], "attempts": 1, "last_error": "error 0"},
        {"id": ids[1], "attempts": 1, "last_error": "error 1"},
    ]
    text = cli(redis_url, "dead", "list", "-q", queue_name).output
    assert text.index(ids[0]) < text.index(ids[1]) < text.index(ids[2])
    assert "error 2" in text


def test_dead_retry_returns_named_jobs_to_pending_with_a_fresh_budget(
    redis_url: str, queue_name: str
) -> None:
    ids = on_queue(redis_url, queue_name, three_dead)
    result = cli(redis_url, "dead", "retry", "--queue", queue_name, ids[1])
    assert result.exit_code == 0, result.output
    assert "retried 1 dead job(s)" in result.output
    assert dead_ids(redis_url, queue_name) == [ids[0], ids[2]]

    job = on_queue(redis_url, queue_name, lambda q: q.get_job(ids[1]))
    assert job is not None
    assert job["state"] == "pending"
    # 1 attempt ran; its move to dead raised the token to 2 (the fence of its last holder).
    assert job["attempts_base"] == job["attempts"] == "2"
    assert "last_error" not in job

    everything = cli(redis_url, "dead", "retry", "--queue", queue_name, "--all")
    assert "retried 2 dead job(s)" in everything.output
    assert dead_ids(redis_url, queue_name) == []
    assert on_queue(redis_url, queue_name, Queue.counts).pending == 3


def test_dead_retry_of_a_job_that_is_not_dead_is_reported_and_exits_1(
    redis_url: str, queue_name: str
) -> None:
    state = on_queue(redis_url, queue_name, populate)
    result = cli(redis_url, "dead", "retry", "-q", queue_name, state.pending[0], state.dead)
    assert result.exit_code == 1
    assert "retried 1 dead job(s)" in result.output
    assert f"skipped {state.pending[0]}: not dead (pending)" in result.output


def test_dead_retry_and_purge_need_job_ids_or_all(redis_url: str, queue_name: str) -> None:
    for verb in ("retry", "purge"):
        result = cli(redis_url, "dead", verb, "--queue", queue_name)
        assert result.exit_code == 2
        assert "--all" in result.output


def test_dead_purge_asks_first_and_a_no_keeps_the_jobs(redis_url: str, queue_name: str) -> None:
    ids = on_queue(redis_url, queue_name, three_dead)
    result = cli(redis_url, "dead", "purge", "--queue", queue_name, "--all", input="n\n")
    assert result.exit_code == 1
    assert f"Delete 3 dead job(s) from queue {queue_name!r}" in result.output
    assert "Aborted" in result.output
    assert dead_ids(redis_url, queue_name) == ids


def test_dead_purge_deletes_named_then_all_dead_jobs(redis_url: str, queue_name: str) -> None:
    ids = on_queue(redis_url, queue_name, three_dead)
    named = cli(redis_url, "dead", "purge", "--queue", queue_name, ids[0], "--yes")
    assert named.exit_code == 0, named.output
    assert "purged 1 dead job(s)" in named.output
    assert on_queue(redis_url, queue_name, lambda q: q.state_of(ids[0])) == "absent"

    confirmed = cli(redis_url, "dead", "purge", "-q", queue_name, "--all", input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert "purged 2 dead job(s)" in confirmed.output
    states = on_queue(redis_url, queue_name, lambda q: _states(q, ids))
    assert states == ["absent"] * 3
    assert on_queue(redis_url, queue_name, Queue.counts).dead == 0


async def _states(queue: Queue, ids: list[JobId]) -> list[str]:
    return [await queue.state_of(job_id) for job_id in ids]


def test_dead_purge_leaves_a_job_that_is_not_dead(redis_url: str, queue_name: str) -> None:
    state = on_queue(redis_url, queue_name, populate)
    result = cli(redis_url, "dead", "purge", "-q", queue_name, "--yes", state.pending[0])
    assert result.exit_code == 1
    assert f"skipped {state.pending[0]}: not dead (pending)" in result.output
    assert on_queue(redis_url, queue_name, lambda q: q.state_of(state.pending[0])) == "pending"


# --- pause | resume -----------------------------------------------------------------------


def test_pause_stops_claims_and_resume_lets_them_through(redis_url: str, queue_name: str) -> None:
    job_id = on_queue(redis_url, queue_name, enqueue)
    paused = cli(redis_url, "pause", queue_name)
    assert paused.exit_code == 0, paused.output
    assert f"paused queue {queue_name!r}" in paused.output
    assert "already paused" in cli(redis_url, "pause", queue_name).output
    claim = on_queue(redis_url, queue_name, lambda q: q.claim(1, LEASE_MS))
    assert claim.paused
    assert claim.jobs == ()
    report = as_json(cli(redis_url, "stats", "--queue", queue_name, "--json"))
    assert report["queues"][0]["paused"] is True

    resumed = cli(redis_url, "resume", queue_name)
    assert resumed.exit_code == 0, resumed.output
    assert f"resumed queue {queue_name!r}" in resumed.output
    claim = on_queue(redis_url, queue_name, lambda q: q.claim(1, LEASE_MS))
    assert not claim.paused
    assert [job.id for job in claim.jobs] == [job_id]


# --- remove -------------------------------------------------------------------------------


def test_remove_refuses_a_held_job_and_deletes_a_free_one(redis_url: str, queue_name: str) -> None:
    state = on_queue(redis_url, queue_name, populate)
    held = cli(redis_url, "remove", state.held.id, "--queue", queue_name)
    assert held.exit_code == 1
    assert "held by a worker (EMQLOCK)" in held.output
    assert state.held.id in held.output
    assert on_queue(redis_url, queue_name, lambda q: q.state_of(state.held.id)) == "active"

    free = cli(redis_url, "remove", state.pending[0], "--queue", queue_name)
    assert free.exit_code == 0, free.output
    assert f"removed {state.pending[0]}" in free.output
    assert on_queue(redis_url, queue_name, lambda q: q.state_of(state.pending[0])) == "absent"

    again = cli(redis_url, "remove", state.pending[0], "--queue", queue_name)
    assert again.exit_code == 1
    assert f"no job {state.pending[0]} in queue {queue_name!r}" in again.output


# --- errors: bad names, unknown queues, unreachable server ---------------------------------

JOB = "JOB0000000000A"


def per_queue_commands(queue: str) -> list[list[str]]:
    return [
        ["stats", "--queue", queue],
        ["inspect", JOB, "--queue", queue],
        ["dead", "list", "--queue", queue],
        ["dead", "retry", "--queue", queue, "--all"],
        ["dead", "purge", "--queue", queue, "--all", "--yes"],
        ["pause", queue],
        ["resume", queue],
        ["remove", JOB, "--queue", queue],
    ]


@pytest.mark.parametrize("args", per_queue_commands("bad/name!"), ids=lambda a: " ".join(a[:2]))
def test_a_bad_queue_name_is_refused_before_connecting(args: list[str]) -> None:
    result = cli(UNREACHABLE, *args)
    assert result.exit_code == 2, result.output
    assert "got 'bad/name!'" in result.output


NAMES_A_NEW_QUEUE = ("pause", "resume")
"""Commands that may name a queue before its first key: pausing it holds its first jobs."""


@pytest.mark.parametrize(
    "index",
    [i for i, args in enumerate(per_queue_commands("q")) if args[0] not in NAMES_A_NEW_QUEUE],
)
def test_an_unknown_queue_is_named(redis_url: str, queue_name: str, index: int) -> None:
    result = cli(redis_url, *per_queue_commands(queue_name)[index])
    assert result.exit_code == 1, result.output
    assert f"no such queue {queue_name!r} (no keys under emq:{{{queue_name}}}:)" in result.output
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys(f"emq:{{{queue_name}}}:*") == []  # nothing created a queue
    finally:
        client.close()


def test_a_malformed_job_id_is_refused_naming_it(redis_url: str, queue_name: str) -> None:
    result = cli(redis_url, "inspect", "JOB-nope", "--queue", queue_name)
    assert result.exit_code == 2
    assert "'JOB-nope'" in result.output


def test_an_unreachable_server_is_a_clear_error(queue_name: str) -> None:
    result = cli(UNREACHABLE, "stats", "--queue", queue_name)
    assert result.exit_code == 1
    assert f"Error: Redis at {UNREACHABLE}" in result.output
    assert "nothing accepts connections at 127.0.0.1:1" in result.output


def test_help_lists_the_admin_commands_and_their_variables() -> None:
    top = CliRunner().invoke(main, ["--help"])
    for command in ("stats", "inspect", "dead", "pause", "resume", "remove"):
        assert command in top.output
    purge = CliRunner().invoke(main, ["dead", "purge", "--help"])
    assert purge.exit_code == 0
    for text in ("--all", "--yes", "EMQ_QUEUE", "EMQ_REDIS_URL", "EMQ_WIRE_VERSION"):
        assert text in purge.output


def test_workers_lists_what_each_live_worker_announced(redis_url: str, queue_name: str) -> None:
    entry = {
        "id": "host-a:42:beef",
        "host": "host-a",
        "pid": 42,
        "queues": [queue_name],
        "concurrency": 10,
        "held": 3,
        "completed": 7,
        "started": 1.0,
        "beat": time.time(),
    }
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(f"emq:{{{queue_name}}}:worker:host-a:42:beef", json.dumps(entry), px=10_000)
        table = CliRunner().invoke(main, ["workers", "-q", queue_name, "--redis-url", redis_url])
        as_json = CliRunner().invoke(
            main, ["workers", "-q", queue_name, "--json", "--redis-url", redis_url]
        )
    finally:
        client.close()
    assert table.exit_code == 0, table.output
    assert "host-a:42:beef" in table.output
    assert table.output.splitlines()[0].split() == [
        "queue",
        "worker",
        "held",
        "concurrency",
        "completed",
        "last",
        "beat",
    ]
    assert json.loads(as_json.output)[queue_name] == [entry]


def test_cancel_marks_a_running_job_and_refuses_one_that_is_not_running(
    redis_url: str, queue_name: str
) -> None:
    async def setup() -> tuple[JobId, JobId]:
        client = connect(redis_url, DEFAULT_WIRE_VERSION)
        try:
            producer = Producer(client)
            running = (await producer.enqueue(queue_name, "charge")).job_id
            await producer.queue(queue_name).claim(1, 60_000)
            waiting = (await producer.enqueue(queue_name, "charge")).job_id
            return running, waiting
        finally:
            await client.aclose()

    running, waiting = anyio.run(setup)
    runner = CliRunner()
    ok = runner.invoke(main, ["cancel", running, "-q", queue_name, "--redis-url", redis_url])
    assert ok.exit_code == 0, ok.output
    assert "cancel requested" in ok.output
    refused = runner.invoke(main, ["cancel", waiting, "-q", queue_name, "--redis-url", redis_url])
    assert refused.exit_code == 1
    assert "not running (pending)" in refused.output
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.smembers(f"emq:{{{queue_name}}}:cancel") == {running.encode()}
    finally:
        client.close()


def test_workers_on_an_unknown_queue_is_an_error_naming_it(redis_url: str, queue_name: str) -> None:
    result = CliRunner().invoke(main, ["workers", "-q", queue_name, "--redis-url", redis_url])
    assert result.exit_code == 1
    assert f"no such queue {queue_name!r}" in result.output
