"""What the server is asked, counted, not timed: each figure in docs/benchmarks/counts.json is
asserted within 10 %, so a change that makes an idle queue, a presence refresh, an offer kept
standing, a claim, a settle or a retry dearer (or cheaper: then publish the new figure) fails
here, at once and on any machine, rather than in a benchmark someone reruns later.

Counted by INFO commandstats (commands run inside scripts included) on a server of its own, one
operation at a time; the client's connection (HELLO, the version fence) and the scripts' loading
happen before the count starts.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bench import lanes_cost
from bench.server import BenchRedis, server_binary
from emq_worker import JobSpec, Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.upkeep_check import check_upkeep
from emq_worker.protocol.values import Failure, HeldLease, OfferTerms
from emq_worker.runtime.agenda import check_window_s, quiet_budget_s
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.offers import (
    MAX_OFFERED_QUEUES,
    OFFER_LEASE_SHARE,
    OFFER_SLACK_MS,
    OFFERS_PER_QUEUE,
)
from emq_worker.runtime.partitioned import PLAIN_WATCH_S
from emq_worker.runtime.presence import (
    IDLE_TTL_MS,
    INDEX_EVERY_TTLS,
    MIN_TTL_MS,
    PRUNE_EVERY,
    Presence,
    WorkerRegistry,
)
from emq_worker.runtime.supervisor import PRESENCE_SHARE
from emq_worker.valkey.connection import connect
from tests.support.commands import OBSERVER_COMMANDS
from tests.support.conformance import Harness
from tests.support.server import RedisServer

COUNTS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "counts.json"
TOLERANCE = 0.10
WINDOW_MS, REAP_BATCH, MAX_ATTEMPTS = 10_000, 100, 3
LEASE_MS, RECEIPT_MS = 600_000, 60_000
QUEUES = 100
BEAT_S, LEASE_S = 1.0, 30.0
"""The defaults (WorkerSettings): the schedule the per-minute figure is counted by."""
OFFER_MS = int(LEASE_S * 1000) // OFFER_LEASE_SHARE


@pytest.fixture(scope="module")
def published() -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(COUNTS.read_text())
    return figures


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("counted")) as server:
        yield server


@pytest.fixture
async def counted(own_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(own_server.url)
    await client.flushall()
    yield client
    await client.aclose()


async def commands_of(client: Redis, operation: Awaitable[object]) -> int:
    """The commands the server ran for `operation` (a coroutine not started yet; the
    counting's own left out)."""
    await client.config_resetstat()
    await operation
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(
        int(fields["calls"])
        for name, fields in stats.items()
        if name.removeprefix("cmdstat_") not in OBSERVER_COMMANDS
    )


def within(measured: float, figure: float) -> bool:
    return abs(measured - figure) <= TOLERANCE * figure


async def check(harness: Harness) -> object:
    return await check_upkeep(harness.queue, WINDOW_MS, REAP_BATCH, MAX_ATTEMPTS)


async def test_an_idle_queue_check_and_a_held_one_cost_what_is_published(
    counted: Redis, published: dict[str, Any]
) -> None:
    await check(Harness.of(counted, "warm-up"))  # connects, fences, loads the scripts
    harness = Harness.of(counted, "idle")
    idle = await commands_of(counted, check(harness))
    held = await commands_of(counted, check(harness))
    assert within(idle, published["idle_check_commands"]), idle
    assert within(held, published["held_check_commands"]), held


async def test_a_presence_refresh_costs_the_same_for_100_queues_as_for_one(
    counted: Redis, published: dict[str, Any]
) -> None:
    await counted.ping()
    costs = {}
    for queues in (1, QUEUES):
        registry = WorkerRegistry(counted, [f"q{n}" for n in range(queues)], 10, 1_000)
        prune = await commands_of(counted, registry.beat(Presence(held=0, completed=0)))
        refresh = await commands_of(counted, registry.beat(Presence(held=0, completed=0)))
        costs[queues] = (prune, refresh)
    assert costs[1] == costs[QUEUES]
    prune, refresh = costs[QUEUES]
    assert within(prune, published["presence_prune_commands"]), prune
    assert within(refresh, published["presence_refresh_commands"]), refresh


async def test_keeping_an_offer_standing_costs_what_is_published(
    counted: Redis, published: dict[str, Any]
) -> None:
    harness = Harness.of(counted, "offered")
    terms = OfferTerms("n0", OFFER_MS, standing=False)
    assert (await harness.queue.claim(10, LEASE_MS, "c0", terms)).offered
    assert await harness.queue.keep_offer("n0", LEASE_MS, OFFER_MS)  # loads the script
    # Another lapse than the last call's: its score moves even within the same millisecond.
    kept = await commands_of(counted, harness.queue.keep_offer("n0", LEASE_MS, OFFER_MS + 1))
    assert within(kept, published["offer_keep_commands"]), kept


def on_grid(period_s: float) -> float:
    return math.floor(period_s / BEAT_S) * BEAT_S


IDLE_PARK_S = WorkerSettings(("q",)).idle_park_ms / 1000
ENTRY_TTL_S = MIN_TTL_MS / 1000
"""A busy worker's entry TTL at the defaults; an idle one's is WorkerRegistry.idle_ttl_ms."""


def at_park_end(period_s: float) -> float:
    """How often a chore that waits for the end of an idle park comes when due every `period_s`:
    at the first park end at or after its time, parks being IDLE_PARK_S long."""
    return math.ceil(period_s / IDLE_PARK_S - 1e-9) * IDLE_PARK_S


def own_per_minute(published: dict[str, Any]) -> float:
    """What each idle worker asks per minute for itself, whatever the queues: a park at most
    `idle_park_ms` long, its entry refreshed every third of its idle TTL (at the end of a park),
    its index every INDEX_EVERY_TTLS busy TTLs (pruned every PRUNE_EVERY of those), a look at
    the partition registry."""
    idle_ttl_s = max(IDLE_TTL_MS / 1000, ENTRY_TTL_S)
    parks = 60 / IDLE_PARK_S
    refresh_s = at_park_end(idle_ttl_s / PRESENCE_SHARE)
    refreshes = 60 / refresh_s * published["presence_refresh_commands"]
    index = published["presence_prune_commands"] - published["presence_refresh_commands"]
    indexed = 60 / (INDEX_EVERY_TTLS * ENTRY_TTL_S) * (index - 1 + 1 / PRUNE_EVERY)
    return float(parks + refreshes + indexed + 60 / PLAIN_WATCH_S)


def offers_per_minute(offers: int, published: dict[str, Any]) -> float:
    """`offers` standing offers, each kept (and a park ended for it) a little before it lapses;
    renewals take the tick of the one-beat grid before their time (agenda.py)."""
    offer_s = on_grid((OFFER_MS - min(OFFER_SLACK_MS, OFFER_MS // 2)) / 1000)
    return float(offers * 60 / offer_s * (published["offer_keep_commands"] + 1))


def idle_per_minute(queues: int, published: dict[str, Any]) -> float:
    """By the beat's schedule at the defaults, what one idle worker on `queues` queues asks per
    minute: each queue's check once per check window; a standing offer on each of its first
    MAX_OFFERED_QUEUES; and its own share (`own_per_minute`)."""
    checks = 60 / check_window_s(queues, BEAT_S, LEASE_S) * published["idle_check_commands"]
    offers = offers_per_minute(min(queues, MAX_OFFERED_QUEUES), published)
    return float(queues * checks + offers + own_per_minute(published))


def fleet_per_minute(workers: int, published: dict[str, Any]) -> float:
    """`workers` idle workers on one queue: one check per window (its maker's), a `held` answer
    per other worker as seldom as a lease taken after it allows (`quiet_budget_s`), the offers
    claim.lua lets stand, and each worker's own share."""
    checks = 60 / check_window_s(1, BEAT_S, LEASE_S) * published["idle_check_commands"]
    budget_s = at_park_end(quiet_budget_s(LEASE_S, BEAT_S, IDLE_PARK_S))
    held = (workers - 1) * 60 / budget_s * published["held_check_commands"]
    offers = offers_per_minute(min(workers, OFFERS_PER_QUEUE), published)
    return float(checks + held + offers + workers * own_per_minute(published))


@pytest.mark.parametrize("queues", [1, 10, 100])
def test_an_idle_worker_costs_what_is_published_per_minute(
    published: dict[str, Any], queues: int
) -> None:
    per_minute = idle_per_minute(queues, published)
    figure = published["idle_commands_per_minute"][str(queues)]
    assert within(per_minute, figure), per_minute
    if queues >= 10:
        assert per_minute / queues <= 60, "an idle queue must cost at most one command a second"


def test_eight_idle_workers_on_one_queue_cost_what_is_published_and_at_most_4_a_second(
    published: dict[str, Any],
) -> None:
    """A fleet shares its queue's upkeep: its maker checks once per window, the others get a
    `held` answer about every 20 s, not every window. It was 10.8 commands a second at 702952b
    (`python -m bench --idle --rows 8:1:0`: each worker refreshed its entry every 3.3 s and
    asked for a check every 10 s, and its parks ended for each); the issue asks at most twice
    one worker's 2.0 then."""
    per_minute = fleet_per_minute(8, published)
    assert within(per_minute, published["fleet_commands_per_minute_8_on_1"]), per_minute
    assert per_minute <= 4 * 60, f"{per_minute / 60:.2f} commands/s"


JOBS_B100, JOBS_B1 = 1_000, 100
"""Small runs: the counts per job are exact, and the same at these sizes as at the bench's."""


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BenchRedis]:
    with BenchRedis(tmp_path_factory.mktemp("per-job"), None, server_binary(None)) as server:
        yield server


@pytest.mark.parametrize("scenario", ["flat", "priority", "lanes-10", "lanes-10-limited", "mixed"])
async def test_a_claim_and_a_settle_cost_what_is_published_per_job(
    bench_server: BenchRedis, published: dict[str, Any], scenario: str
) -> None:
    figures = published["per_job_commands"][scenario]
    busy = await lanes_cost.run_once(bench_server, scenario, JOBS_B100, 100)
    single = await lanes_cost.run_once(bench_server, scenario, JOBS_B1, 1)
    measured = {
        "claim_b100": busy.claim_cmds,
        "settle_b100": busy.settle_cmds,
        "claim_b1": single.claim_cmds,
        "settle_b1": single.settle_cmds,
    }
    off = {k: (round(v, 2), figures[k]) for k, v in measured.items() if not within(v, figures[k])}
    assert not off, f"{scenario}: measured vs published {off}"


async def retried_per_job(server: BenchRedis, jobs: int, batch: int) -> float:
    """Commands per job of a settle that fails every job with a delay (a retry scheduled)."""
    server.flush()
    client = connect(server.url, DEFAULT_WIRE_VERSION)
    try:
        producer = Producer(client)
        queue = producer.queue("guard.retry")
        await producer.enqueue_many(queue.name, [JobSpec(payload=b"x")] * jobs)
        await queue.claim(0, LEASE_MS)  # the scripts loaded before the count
        commands = done = 0
        while done < jobs:
            claimed = (await queue.claim(batch, LEASE_MS)).jobs
            failures = [
                Failure(HeldLease(job.id, job.token, job.nonce), 60_000, 3, "boom")
                for job in claimed
            ]
            commands -= lanes_cost._read(server).cmds
            await queue.settle(failures, RECEIPT_MS)
            commands += lanes_cost._read(server).cmds
            done += len(claimed)
    finally:
        await client.aclose()
    return commands / jobs


async def test_a_retry_costs_what_is_published_per_job(
    bench_server: BenchRedis, published: dict[str, Any]
) -> None:
    figures = published["per_job_commands"]["retry"]
    busy = await retried_per_job(bench_server, JOBS_B100, 100)
    single = await retried_per_job(bench_server, JOBS_B1, 1)
    assert within(busy, figures["settle_b100"]), busy
    assert within(single, figures["settle_b1"]), single
