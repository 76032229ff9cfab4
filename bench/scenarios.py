"""The scenarios every system runs: enqueue, drains, pickup latency, MONITOR counts, RSS.

Each function takes one measurement of one system and records it in the harness's results;
the caller repeats it and takes medians. Every measurement starts from an empty keyspace.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import Any

from bench.harness import Harness
from bench.monitor import Monitor
from bench.peers import System
from bench.server import delta

READY_TIMEOUT_S = 60.0
SETTLE_S = 0.3
"""How long a freshly started worker idles before probes arrive (so 'idle' means idle)."""
MONITOR_TAIL_S = 0.2


def drain_timeout(n: int) -> float:
    return 60.0 + n / 50


def enqueue(h: Harness, system: System) -> None:
    plan = h.plan
    h.redis.flush()
    cfg = {
        "mode": "enqueue",
        "single": plan.enqueue_single,
        "concurrent": plan.enqueue_concurrent,
        "bulk": plan.enqueue_bulk,
        "width": plan.enqueue_width,
        "batch": plan.bulk_batch,
    }
    with h.launch(system, cfg, h.cores.worker) as proc:
        done = proc.wait("done", drain_timeout(plan.enqueue_bulk + plan.enqueue_concurrent))
        proc.finish()
    h.record(system, "enqueue.single.jobs_s", plan.enqueue_single / done["single_s"])
    h.record(system, "enqueue.concurrent.jobs_s", plan.enqueue_concurrent / done["concurrent_s"])
    bulk_s = done.get("bulk_s")
    h.record(system, "enqueue.bulk.jobs_s", plan.enqueue_bulk / bulk_s if bulk_s else None)


def drain(h: Harness, system: System, task: str, concurrency: int, share: int = 1) -> None:
    """n pre-enqueued jobs (the system's drain size / share), one worker process: throughput and
    what each job cost."""
    n = h.plan.drain_size(system.name) // share
    h.redis.flush()
    h.fill(system, n, task)
    before = h.redis.snapshot()
    cfg = {"mode": "drain", "n": n, "concurrency": concurrency}
    with h.launch(system, cfg, h.cores.worker) as proc:
        proc.wait("ready", READY_TIMEOUT_S)
        done = proc.wait("done", drain_timeout(n))
        after = h.redis.snapshot()
        proc.finish()
    d = delta(before, after)
    key = f"drain.{task}.c{concurrency}"
    h.record(system, f"{key}.jobs_s", n / (done["last_finish"] - done["first_start"]))
    h.record(system, f"{key}.worker_cpu_ms", done["cpu_s"] * 1000 / n)
    h.record(system, f"{key}.redis_cpu_ms", d.cpu_s * 1000 / n)
    h.record(system, f"{key}.redis_cmds", d.total_calls / n)
    # The worker's own requests: a realistic body's calls on its own client are not counted.
    h.record(system, f"{key}.round_trips", (done["sends"] - done.get("body_sends", 0)) / n)
    h.note(system, f"{key}.socket_reads_per_job", round(d.reads / n, 4))
    elapsed = done["last_finish"] - done["first_start"]
    h.record(system, f"{key}.worker_cpu_busy_pct", done["cpu_s"] / elapsed * 100)
    if done.get("on_cpu_s"):  # (the kernel keeps schedstat)
        # Idle: neither on a CPU nor waiting for one (the loop waited on I/O). Busy % falls when
        # another process takes the worker's core; idle % does not.
        idle = elapsed - done["on_cpu_s"] - done["cpu_wait_s"]
        h.record(system, f"{key}.worker_idle_pct", max(0.0, idle / elapsed * 100))
        h.note(system, f"{key}.worker_cpu_wait_pct", round(done["cpu_wait_s"] / elapsed * 100, 1))
        # On a shared machine another process on the worker's core takes 5-70 % of a drain's
        # wall time from one run to the next: jobs/s over the time the worker could run tells
        # a slower system from a crowded core (the server's own core is not accounted for).
        runnable = elapsed - done["cpu_wait_s"]
        h.note(system, f"{key}.jobs_s_runnable", round(n / runnable) if runnable > 0 else None)
    h.note(system, f"{key}.redis_cpu_busy_pct", round(d.cpu_s / d.seconds * 100, 1))
    top = dict(Counter(d.calls).most_common(12))
    h.note(system, f"{key}.commands", {k: round(v / n, 3) for k, v in top.items()})


def latency(h: Harness, system: System) -> None:
    """Enqueue-to-handler-start of every probe job: an idle worker, then a steady load. For
    emq-worker also the idle phase with hand-offs off (a wake token, then a claim), and the
    transport's floor."""
    plan = h.plan
    phases = (
        ("idle", plan.idle_probes, plan.idle_rate),
        ("load", plan.load_probes, plan.load_rate),
    )
    for phase, n, rate in phases:
        pickup(h, system, f"latency.{phase}", n, rate)
    if system.name == "emq":
        settings = {"handoff": False}
        pickup(h, system, "latency.claimed.idle", plan.idle_probes, plan.idle_rate, settings)
        transport_floor(h, system)


def pickup(
    h: Harness,
    system: System,
    key: str,
    n: int,
    rate: float,
    settings: dict[str, Any] | None = None,
) -> None:
    """`n` probes at `rate`/s to a fresh worker (emq-worker `settings` overrides, if any)."""
    h.redis.flush()
    cfg: dict[str, Any] = {"mode": "drain", "n": n, "concurrency": h.plan.latency_concurrency}
    if settings:
        cfg["settings"] = settings
    with h.launch(system, cfg, h.cores.worker) as worker:
        worker.wait("ready", READY_TIMEOUT_S)
        time.sleep(SETTLE_S)
        produce = {"mode": "produce", "n": n, "rate": rate}
        with h.launch(system, produce, h.cores.driver) as producer:
            producer.wait("done", 60 + n / rate)
            producer.finish()
        done = worker.wait("done", READY_TIMEOUT_S)
        worker.finish()
    h.record(system, f"{key}.p50_ms", done["p50_ms"])
    h.record(system, f"{key}.p99_ms", done["p99_ms"])
    h.note(system, f"{key}.max_ms", done["max_ms"])


def transport_floor(h: Harness, system: System) -> None:
    """The same idle pacing with no queue at all: a bare LPUSH -> BLPOP hand-off between the
    same cores, and a lone PING from an idle process (the floor any pickup pays, recorded next
    to emq-worker's figures since it is the same for every system)."""
    plan = h.plan
    h.redis.flush()
    floor = dataclasses.replace(system, module="bench.runners.floor_runner")
    n = plan.idle_probes
    with h.launch(floor, {"mode": "consume", "n": n}, h.cores.worker) as consumer:
        consumer.wait("ready", READY_TIMEOUT_S)
        with h.launch(
            floor, {"mode": "produce", "n": n, "rate": plan.idle_rate}, h.cores.driver
        ) as producer:
            pings = producer.wait("done", 60 + n / plan.idle_rate)
            producer.finish()
        handoff = consumer.wait("done", READY_TIMEOUT_S)
        consumer.finish()
    h.record(system, "floor.handoff.p50_ms", handoff["p50_ms"])
    h.record(system, "floor.handoff.p99_ms", handoff["p99_ms"])
    h.record(system, "floor.ping.p50_ms", pings["p50_ms"])
    h.record(system, "floor.ping.p99_ms", pings["p99_ms"])


def roundtrips(h: Harness, system: System) -> None:
    """Top-level commands per job, counted by MONITOR in a short no-op drain of its own."""
    n = h.plan.monitor_n
    h.redis.flush()
    h.fill(system, n, "noop")
    monitor = Monitor(h.redis.port)
    try:
        with h.launch(system, {"mode": "drain", "n": n, "concurrency": 100}, h.cores.worker) as p:
            done = p.wait("done", drain_timeout(n))
            time.sleep(MONITOR_TAIL_S)
            p.finish()
    finally:
        seen = monitor.stop()
    window = [
        s for s in seen if not s.from_lua and done["first_start"] <= s.at <= done["last_finish"]
    ]
    in_lua = [s for s in seen if s.from_lua and done["first_start"] <= s.at <= done["last_finish"]]
    h.record(system, "toplevel.cmds_per_job", len(window) / n)
    by_command = Counter(s.command for s in window).most_common(12)
    h.note(system, "toplevel.by_command", {k: round(v / n, 3) for k, v in by_command})
    h.note(system, "toplevel.lua_cmds_per_job", round(len(in_lua) / n, 3))


def rss(h: Harness, system: System) -> None:
    """Worker RSS idle and with k long jobs in flight (concurrency k)."""
    k = h.plan.rss_k
    h.redis.flush()
    h.fill(system, k, "hold", {"seconds": h.plan.hold_s})
    cfg = {
        "mode": "hold",
        "k": k,
        "concurrency": k,
        "settings": {"job_timeout_ms": int(h.plan.hold_s * 2000)},
    }
    with h.launch(system, cfg, h.cores.worker) as proc:
        ready = proc.wait("ready", READY_TIMEOUT_S)
        held = proc.wait("held", drain_timeout(k))
    h.record(system, "rss.idle_mb", ready["VmRSS"] / 1024)
    h.record(system, "rss.held_mb", held["VmRSS"] / 1024)
