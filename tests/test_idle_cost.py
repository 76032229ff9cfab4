"""What an idle fleet asks of the server, counted by INFO commandstats (commands run inside
scripts included) on a server of its own, over a window: a count, not a timing.

Targets: one idle worker serving 100 queues makes at most one command per queue per second (it
made ~210 when presence cost four commands per queue every refresh and an idle check ten); one
idle worker on one queue under 3.5 commands/s (it made 8 when it checked the queue every beat and
renewed its hand-off offer with a claim); eight idle workers on one queue under 4 in all, twice
what one worker made at 702952b (2.0): they made 10.8 then (each refreshed its entry every 3.3 s
and asked for a `held` check every 10 s, and its parks ended for each). Before, every worker
reaped, promoted, scanned repeats and claimed every queue every beat (about 27 commands per queue
per worker per second), and wake tokens left over from a backlog (up to 64 per queue) were popped
one per park, each followed by a claim on every queue: a worker on 100 such queues spun for
minutes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, WorkerSettings
from emq_worker.protocol.keys import QueueKeys
from tests.support.commands import commands_in, parked
from tests.support.running import running_worker
from tests.support.server import RedisServer
from tests.support.wait import eventually

pytestmark = pytest.mark.fault

WINDOW_S = 30.0
"""Longer than a fleet's slowest idle chores (an idle entry refreshed every 10-18 s, a `held`
answer every 18-26 s) and than a check window of 100 queues at the default beat (10 beats of 1 s),
so the count is not a matter of where the window falls."""
STALE_TOKENS = 64
"""What a backlog leaves on a queue's wake list when no worker was parked: the list's cap."""


@dataclass(frozen=True, slots=True)
class Fleet:
    queues: int
    workers: int
    concurrency: int = 10
    """The default's; a slot for each of 100 queues."""


FLEETS = {
    "one worker, 100 queues": Fleet(queues=100, workers=1, concurrency=100),
    "one worker, one queue": Fleet(queues=1, workers=1),
    "eight workers, one queue": Fleet(queues=1, workers=8),
}


@dataclass(frozen=True, slots=True)
class Rate:
    per_second: float
    most: list[tuple[str, int]]
    """The most called commands: what a failure names."""


@pytest.fixture
def idle_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "idle") as server:
        yield server


@pytest.fixture
async def observer(idle_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(idle_server.url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture(scope="module")
async def idle_rates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rate]:
    """Each fleet on a server of its own, all counted over the same window: the three windows
    at once, not one after another (idle workers wait; they hardly share the CPU)."""
    rates: dict[str, Rate] = {}
    with ExitStack() as servers:

        async def measure(name: str, fleet: Fleet) -> None:
            server = servers.enter_context(RedisServer(tmp_path_factory.mktemp("idle")))
            queues = tuple(f"idle-{n}" for n in range(fleet.queues))
            settings = WorkerSettings(queues, redis_url=server.url, concurrency=fleet.concurrency)
            async with Redis.from_url(server.url, decode_responses=True) as observer:
                rates[name] = await idle_rate(observer, settings, fleet.workers)

        async with anyio.create_task_group() as fleets:
            for name, fleet in FLEETS.items():
                fleets.start_soon(measure, name, fleet)
    return rates


def per_second(counts: dict[str, int], window_s: float) -> float:
    return sum(counts.values()) / window_s


async def idle_rate(observer: Redis, settings: WorkerSettings, workers: int) -> Rate:
    """Commands/s of `workers` idle workers with `settings`, once all are parked, over WINDOW_S."""
    async with AsyncExitStack() as stack:
        for _ in range(workers):
            await stack.enter_async_context(running_worker(settings, App()))
        await parked(observer, workers=workers)
        counts = await commands_in(observer, WINDOW_S)
    return Rate(per_second(counts, WINDOW_S), counts.most_common(8))


def test_one_idle_worker_serving_100_queues_makes_at_most_100_commands_a_second(
    idle_rates: dict[str, Rate],
) -> None:
    rate = idle_rates["one worker, 100 queues"]
    assert rate.per_second <= 100, f"{rate.per_second:.0f} commands/s; most called: {rate.most}"


def test_one_idle_worker_on_one_queue_makes_under_3_5_commands_a_second(
    idle_rates: dict[str, Rate],
) -> None:
    rate = idle_rates["one worker, one queue"]
    assert rate.per_second < 3.5, f"{rate.per_second:.1f} commands/s; most called: {rate.most}"


def test_eight_idle_workers_on_one_queue_make_under_4_commands_a_second_in_all(
    idle_rates: dict[str, Rate],
) -> None:
    """One check per window for the fleet (its maker's), a `held` answer per other worker about
    every 20 s, one worker's offer kept (claim.lua lets one stand), and each worker's parks
    (one per `idle_park_ms`) and idle entry (every 10 s, when a park ends)."""
    rate = idle_rates["eight workers, one queue"]
    assert rate.per_second < 4, f"{rate.per_second:.1f} commands/s; most called: {rate.most}"


async def test_wake_tokens_a_backlog_left_behind_are_cleared_not_worked_through(
    idle_server: RedisServer, observer: Redis
) -> None:
    """Each queue's stale tokens cost one wake (its claim finds pending empty and deletes the
    rest), not 64 wakes each followed by a claim on every queue."""
    queues = tuple(f"stale-{n}" for n in range(20))
    wake_keys = [QueueKeys.of(name).wake for name in queues]
    for key in wake_keys:
        await observer.lpush(key, *["1"] * STALE_TOKENS)
    settings = WorkerSettings(queues=queues, redis_url=idle_server.url, concurrency=100)
    async with running_worker(settings, App()):

        async def all_cleared() -> bool:
            return await observer.exists(*wake_keys) == 0

        await eventually(all_cleared, timeout=10, what="the stale wake tokens cleared")
        await parked(observer)
        window_s = 3.0
        counts = await commands_in(observer, window_s)
    rate = per_second(counts, window_s)
    assert rate < 200, f"{rate:.0f} commands/s; most called: {counts.most_common(8)}"
