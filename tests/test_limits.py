"""Per-queue concurrency ceiling and rate limit, enforced by the claim script: on the script, on
two real worker processes (a ledger and the claimed events), and through `emq-worker limit`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import redis
from click.testing import CliRunner, Result
from redis.asyncio import Redis

from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.jobs import events
from emq_worker.jobs.producer import JobSpec, Producer
from emq_worker.protocol.limits import LIMITER, Limits, Rate, parse_rate, read_limits, set_limits
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import Limited
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import HeldLease
from tests.support.processes import Ledger, WorkerProcesses
from tests.support.wait import eventually

LEASE_MS = 30_000
FAR_WINDOW_MS = 2**40
"""A window of ~35 years: aligned on the epoch, the current one ends in 2039, so a test never
sees it roll over."""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes


async def server_now_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def fill(client: Redis, queue: str, n: int, task: str = "noop", **kwargs: int) -> None:
    specs = [JobSpec(task, kwargs) for _ in range(n)]
    await Producer(client).enqueue_many(queue, specs)


# --- the claim script ---------------------------------------------------------------------


async def test_the_ceiling_caps_active_jobs_across_claims_and_frees_with_a_settle(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    await fill(client, queue_name, 5)
    await set_limits(client, queue_name, concurrency=2)

    first = await queue.claim(10, LEASE_MS)
    assert len(first.jobs) == 2  # the ceiling bound it, and the reply says so with the jobs
    assert first.limited == Limited(reason="concurrency", retry_after_ms=0)
    refused = await queue.claim(10, LEASE_MS)
    assert refused.jobs == ()
    assert refused.limited == Limited(reason="concurrency", retry_after_ms=0)
    assert (await queue.counts()).pending == 3  # a refused claim pops nothing

    job = first.jobs[0]
    await queue.complete(HeldLease(job.id, job.token, job.nonce), 60_000)
    again = await queue.claim(10, LEASE_MS)
    assert len(again.jobs) == 1
    assert (await queue.counts()).active == 2
    await set_limits(client, queue_name, concurrency=10)
    below = await queue.claim(1, LEASE_MS)  # well under the ceiling: a plain reply
    assert (len(below.jobs), below.limited) == (1, None)


async def test_the_rate_limit_leases_max_per_window_then_says_when_it_reopens(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    await fill(client, queue_name, 5)
    await set_limits(client, queue_name, rate=Rate(3, FAR_WINDOW_MS))

    before = await server_now_ms(client)
    under = await queue.claim(2, LEASE_MS)
    assert (len(under.jobs), under.limited) == (2, None)
    last = await queue.claim(10, LEASE_MS)  # cut to the room left, and says it is used up
    assert len(last.jobs) == 1
    assert last.limited is not None
    assert last.limited.reason == "rate"
    refused = await queue.claim(10, LEASE_MS)
    after = await server_now_ms(client)

    window_end = (before // FAR_WINDOW_MS + 1) * FAR_WINDOW_MS
    assert refused.jobs == ()
    assert refused.limited is not None
    assert refused.limited.reason == "rate"
    assert window_end - after <= refused.limited.retry_after_ms <= window_end - before
    assert (await queue.counts()).pending == 2
    assert await client.get(queue.keys.prefix + LIMITER) == b"3"
    assert await client.pexpiretime(queue.keys.prefix + LIMITER) == window_end


async def test_a_limiter_left_from_another_window_counts_nothing(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    await fill(client, queue_name, 3)
    await set_limits(client, queue_name, rate=Rate(3, FAR_WINDOW_MS))
    await client.set(queue.keys.prefix + LIMITER, 99, px=60_000)  # not this window's end

    assert len((await queue.claim(10, LEASE_MS)).jobs) == 3


SHORT_WINDOW = Rate(2, 200)


async def until_server_clock(client: Redis, at_ms: int, what: str) -> None:
    """Wait (polling) until the server's clock reads `at_ms`: the clock the rate windows follow."""

    async def reached() -> bool:
        return await server_now_ms(client) >= at_ms

    await eventually(reached, what=what)


@pytest.mark.parametrize("stall", [False, True], ids=["prompt", "stalled-past-the-window"])
async def test_a_short_window_reopens_on_the_server_clock(
    client: Redis, scripts: Scripts, queue_name: str, stall: bool
) -> None:
    """A window leases its 2 jobs and refuses the next claim until its end by the server's clock;
    then the next window leases 2 again. A loaded machine can stall the test past the window's end
    between two claims (`stall` does so on purpose): that claim is the next window's and leases
    2, so the refusal is looked for claim by claim, and every claim that leased must have a window
    boundary (on the server's clock) between itself and the claim before it."""
    window = SHORT_WINDOW.duration_ms
    queue = Queue(client, scripts, queue_name)
    await fill(client, queue_name, 20)
    await set_limits(client, queue_name, rate=SHORT_WINDOW)

    began = await server_now_ms(client)
    first = await queue.claim(10, LEASE_MS)
    ended = await server_now_ms(client)
    assert len(first.jobs) == 2  # a fresh limiter: the whole of the first window
    if stall:
        await until_server_clock(client, ended + window, "a stall of one window")
    for _ in range(8):  # 2 + 8 x 2 leases at most: 2 of the 20 jobs are left for the reopening
        previous_began, began = began, await server_now_ms(client)
        refused = await queue.claim(10, LEASE_MS)
        ended = await server_now_ms(client)
        if not refused.jobs:
            break
        # It leased: a window ended since the claim before it (a stall), and it took the next
        # window's 2; the server's clock must have crossed a window's end between the two.
        assert len(refused.jobs) == 2
        assert ended // window > previous_began // window
    else:
        raise AssertionError("each of 8 claims came in a new window: the limit never refused")
    assert refused.limited is not None
    assert refused.limited.reason == "rate"
    assert 0 < refused.limited.retry_after_ms <= window

    # The script read its clock before `ended`: its window is over once the clock reads this.
    await until_server_clock(client, ended + refused.limited.retry_after_ms, "the window's end")
    assert len((await queue.claim(10, LEASE_MS)).jobs) == 2


async def test_pause_still_wins_over_the_limits(
    client: Redis, scripts: Scripts, queue_name: str
) -> None:
    queue = Queue(client, scripts, queue_name)
    await fill(client, queue_name, 1)
    await set_limits(client, queue_name, concurrency=1, rate=Rate(1, FAR_WINDOW_MS))
    await queue.pause()
    result = await queue.claim(1, LEASE_MS)
    assert (result.paused, result.limited, result.jobs) == (True, None, ())


def test_rates_parse_and_bad_values_are_named() -> None:
    assert parse_rate("100/1s") == Rate(100, 1000)
    assert parse_rate("100/s") == Rate(100, 1000)
    assert parse_rate("5/250ms") == Rate(5, 250)
    assert parse_rate("60/2m") == Rate(60, 120_000)
    for bad in ("100", "x/1s", "100/1d", "0/1s", "10/0ms", "-1/1s"):
        with pytest.raises(ConfigError, match=r"rate|window") as caught:
            parse_rate(bad)
        assert bad in str(caught.value) or "got 0" in str(caught.value)
    with pytest.raises(ConfigError, match="concurrency must be an integer >= 1; got 0"):
        Limits(concurrency=0)


# --- two real worker processes --------------------------------------------------------------


def most_running_at_once(ledger: Ledger) -> int:
    """Replay the ledger (lines in the order they were appended, across both processes)."""
    running = peak = 0
    for entry in ledger.entries():
        running += 1 if entry.kind == "start" else -1
        peak = max(peak, running)
    return peak


async def test_the_ceiling_holds_across_two_worker_processes(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    ceiling, jobs = 3, 16
    await set_limits(client, queue_name, concurrency=ceiling)
    started = [
        workers.start(
            name,
            queue=queue_name,
            redis_url=redis_url,
            lease_ms=10_000,
            beat_ms=200,
            # Each worker runs at most 2, so the ceiling's third slot can only go to the other
            # process: both must claim, and without the ceiling the two would run 4 at once.
            extra=["--concurrency", "2"],
        )
        for name in ("a", "b")
    ]
    for worker in started:
        await worker.wait_event("worker_started", within_s=30)
    await fill(client, queue_name, jobs, task="sleep", ms=200)

    async def all_done() -> bool:
        return len(workers.ledger.find("done")) == jobs

    await eventually(all_done, timeout=60, what=f"{jobs} jobs done")
    pids = {entry.pid for entry in workers.ledger.find("start")}
    assert len(pids) == 2, "both workers should have run jobs"
    assert most_running_at_once(workers.ledger) == ceiling


async def test_the_rate_limit_holds_across_two_worker_processes(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    most, window_ms, jobs = 4, 400, 14
    beat_ms = 5_000
    await set_limits(client, queue_name, rate=Rate(most, window_ms))
    claimed_at: list[int] = []
    async with events.open_events(client, queue_name) as stream:
        await fill(client, queue_name, jobs)
        for name in ("a", "b"):
            workers.start(
                name,
                queue=queue_name,
                redis_url=redis_url,
                lease_ms=10_000,
                beat_ms=beat_ms,
                extra=["--concurrency", "10"],
            )
        with anyio.fail_after(60):
            async for event in stream:
                if event.event == "claimed":
                    assert event.at_ms is not None
                    claimed_at.append(event.at_ms)
                if len(claimed_at) == jobs:
                    break
    per_window = Counter(at // window_ms for at in claimed_at)
    assert max(per_window.values()) == most, per_window
    assert len(per_window) >= -(-jobs // most)  # 14 jobs at 4 per window need 4 windows
    # The workers parked until each window reopened instead of waiting out their beat (three
    # beats if they had): the 4 windows take about 1.2-1.6 s.
    offsets = [at - min(claimed_at) for at in claimed_at]
    assert max(offsets) < beat_ms, offsets


# --- emq-worker limit -----------------------------------------------------------------------


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", url])


def test_limit_sets_shows_and_clears(redis_url: str, queue_name: str) -> None:
    result = cli(redis_url, "limit", "--queue", queue_name, "--concurrency", "5")
    assert result.exit_code == 0, result.output
    result = cli(redis_url, "limit", "--queue", queue_name, "--rate", "100/1s")
    assert result.exit_code == 0, result.output
    assert "concurrency 5; rate 100/1000ms" in result.output

    shown = cli(redis_url, "limit", "--queue", queue_name, "--json")
    assert json.loads(shown.output) == {
        "queue": queue_name,
        "concurrency": 5,
        "rate_max": 100,
        "rate_window_ms": 1000,
    }
    meta = redis.Redis.from_url(redis_url).hgetall(f"emq:{{{queue_name}}}:meta")
    assert meta == {b"concurrency": b"5", b"max": b"100", b"duration": b"1000"}

    cleared = cli(redis_url, "limit", "--queue", queue_name, "--clear")
    assert cleared.exit_code == 0, cleared.output
    assert "concurrency none; rate none" in cleared.output

    async def read() -> Limits:
        from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
        from emq_worker.valkey.connection import connect

        async_client = connect(redis_url, DEFAULT_WIRE_VERSION)
        try:
            return await read_limits(async_client, queue_name)
        finally:
            await async_client.aclose()

    assert anyio.run(read) == Limits()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--rate", "100/1d"], "'100/1d'"),
        (["--rate", "lots"], "'lots'"),
        (["--concurrency", "0"], "got 0"),
        (["--concurrency", "many"], "'many'"),
    ],
)
def test_limit_refuses_bad_values_naming_them(
    redis_url: str, queue_name: str, args: list[str], named: str
) -> None:
    result = cli(redis_url, "limit", "--queue", queue_name, *args)
    assert result.exit_code == 2
    assert named in result.output
