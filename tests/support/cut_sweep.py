"""Silent cuts swept over lengths and phases: `python -m tests.support.cut_sweep 600,700 30,250`
cuts the worker's path (tests/support/relay.py) for each length (ms) starting each phase (ms)
before a renewal tick, with the settings of tests/test_silent_cut.py (lease 1500, renew every
500), and prints per run the leases self-fenced or lost and the jobs run again.
`EMQ_TEST_SERVER=valkey` runs it on Valkey."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anyio

from emq_worker import Producer
from emq_worker.protocol.scripts import Scripts
from tests.support.relay import Relay
from tests.support.running import running_worker
from tests.support.server import RedisServer
from tests.support.wait import until
from tests.test_silent_cut import JOBS, RENEW_MS, cut_settings, held_app


async def one_cut(url: str, queue: str, cut_ms: int, before_tick_ms: int) -> dict[str, int]:
    started: list[tuple[str, int]] = []
    stopped: dict[str, float] = {}
    host, _, port = url.removeprefix("redis://").partition("/")[0].rpartition(":")
    async with Producer.from_url(url) as producer:
        for _ in range(JOBS):
            await producer.enqueue(queue, "held")
    async with Relay(host, int(port)).running() as relay:
        relay.watch = Scripts().by_name["renew"].sha.encode()
        settings = cut_settings(queue, relay.url)
        async with running_worker(settings, held_app(started, stopped)) as worker:
            await until(lambda: len(started) == JOBS, what="every job started")
            await until(lambda: worker.counters.renew_sweeps >= 1, what="a renewal answered")
            cut_at = relay.marks[-1] + (RENEW_MS - before_tick_ms) / 1000
            while cut_at < time.monotonic() + 0.05:
                cut_at += RENEW_MS / 1000
            await anyio.sleep(cut_at - time.monotonic())
            relay.cut()
            await anyio.sleep(cut_ms / 1000)
            relay.heal()
            sweeps = worker.counters.renew_sweeps
            await until(lambda: worker.counters.renew_sweeps >= sweeps + 6, what="renewals")
            counters = worker.counters.snapshot()
    return {
        "self_fenced": counters["self_fenced"],
        "lost": counters["leases_lost"],
        "run_again": len(started) - JOBS,
    }


async def sweep(lengths: list[int], phases: list[int]) -> None:
    with RedisServer(Path(tempfile.mkdtemp()) / "server") as server:
        runs = 0
        for cut_ms in lengths:
            for before in phases:
                runs += 1
                found = await one_cut(server.url, f"cut_sweep.{runs}", cut_ms, before)
                print(f"cut {cut_ms} ms, {before} ms before a tick: {found}", flush=True)


if __name__ == "__main__":
    lengths, phases = ([int(x) for x in arg.split(",")] for arg in sys.argv[1:3])
    anyio.run(sweep, lengths, phases)
