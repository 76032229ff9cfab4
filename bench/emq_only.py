"""Scenarios only emq-worker runs: the renewal sweep (5) and the recovery of expired leases (6).

The peers have no lease renewal sweep to compare: arq marks a running job with an in-progress key
whose expiry is fixed at claim (job timeout + 10 s), and SAQ's per-job heartbeat is off by default
(its worker sweeps stuck jobs every 60 s).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import anyio

from bench.harness import QUEUE, Harness
from bench.monitor import Monitor, Seen
from bench.peers import System
from bench.procs import BenchError, Proc
from bench.scenarios import READY_TIMEOUT_S, drain_timeout
from bench.server import delta
from emq_worker import JobSpec, Producer
from emq_worker.protocol.scripts import Scripts

SLOWLOG_DEFAULT_US = 10_000
SLOWLOG_LEN = 100_000
BACK_POLL_S = 0.01


def renewal(h: Harness, system: System) -> None:
    for k in h.plan.renew_ks:
        _renewal(h, system, k)


def _renewal(h: Harness, system: System, k: int) -> None:
    """Hold k jobs; time each renew call (SLOWLOG), then count calls per tick (MONITOR)."""
    plan, client = h.plan, h.redis.client
    sha = Scripts().by_name["renew"].sha
    h.redis.flush()
    h.fill(system, k, "hold", {"seconds": plan.hold_s})
    cfg = {
        "mode": "hold",
        "k": k,
        "concurrency": k,
        "settings": {
            "lease_ms": plan.renew_lease_ms,
            "renew_every_ms": plan.renew_every_ms,
            "job_timeout_ms": int(plan.hold_s * 2000),
        },
    }
    key = f"renewal.k{k}"
    with h.launch(system, cfg, h.cores.worker) as proc:
        proc.wait("held", drain_timeout(k))
        time.sleep(plan.renew_every_ms / 1000)
        client.config_set("slowlog-max-len", SLOWLOG_LEN)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        before = h.redis.snapshot()
        first = _sends(proc)
        time.sleep(plan.renew_window_s)
        last = _sends(proc)
        after = h.redis.snapshot()
        entries = client.slowlog_get(SLOWLOG_LEN)
        client.config_set("slowlog-log-slower-than", SLOWLOG_DEFAULT_US)
        client.slowlog_reset()
        monitor = Monitor(h.redis.port)
        try:
            time.sleep(plan.renew_window_s)
        finally:
            seen = monitor.stop()
    renew_us = [e["duration"] for e in entries if _is_call(e, sha)]
    ticks = _ticks([s for s in seen if s.command == "evalsha" and s.arg1 == sha], plan)
    per_tick = sum(ticks) / len(ticks) if ticks else None
    d = delta(before, after)
    h.record(system, f"{key}.calls_per_tick", per_tick)
    h.record(
        system,
        f"{key}.round_trips_s",
        (last["count"] - first["count"]) / (last["at"] - first["at"]),
    )
    h.note(system, f"{key}.socket_reads_s", round(d.reads / d.seconds, 2))
    sweeps = len(renew_us) / per_tick if per_tick else 0
    h.record(system, f"{key}.sweep_ms", sum(renew_us) / 1000 / sweeps if sweeps else None)
    h.record(system, f"{key}.max_call_ms", max(renew_us) / 1000 if renew_us else None)
    h.record(system, f"{key}.redis_cmds_s", d.total_calls / d.seconds)
    h.note(system, f"{key}.redis_cpu_pct", round(d.cpu_s / d.seconds * 100, 2))
    evalsha_calls = d.calls.get("evalsha", 0)
    if evalsha_calls:
        # Cross-check of the SLOWLOG timing: every evalsha in the window (renew, reap, promote).
        mean_us = d.usec.get("evalsha", 0) / evalsha_calls
        h.note(system, f"{key}.commandstats_evalsha_us_per_call", round(mean_us, 1))
    h.note(system, f"{key}.renew_calls_timed", len(renew_us))
    h.note(system, f"{key}.top_level_cmds_s", _top_level_rate(seen, plan.renew_window_s))


def _sends(proc: Proc) -> dict[str, Any]:
    """The requests the worker has sent so far (it reports on SIGUSR1)."""
    os.kill(proc.pid, signal.SIGUSR1)
    return proc.wait("sends", READY_TIMEOUT_S)


def _is_call(entry: dict[str, Any], sha: str) -> bool:
    command = entry["command"]
    words = (command.decode() if isinstance(command, bytes) else str(command)).split()
    return len(words) > 1 and words[0].lower() == "evalsha" and words[1] == sha


def _ticks(calls: list[Seen], plan: Any) -> list[int]:
    """Renew calls grouped into ticks (calls closer than a third of the interval are one tick);
    the first and last groups are dropped, as the window may cut them."""
    gap = plan.renew_every_ms / 1000 / 3
    groups: list[int] = []
    last = None
    for call in calls:
        if last is None or call.at - last > gap:
            groups.append(0)
        groups[-1] += 1
        last = call.at
    return groups[1:-1] if len(groups) > 2 else groups


def _top_level_rate(seen: list[Seen], seconds: float) -> dict[str, float]:
    rates: dict[str, float] = {}
    for s in seen:
        if not s.from_lua:
            rates[s.command] = rates.get(s.command, 0) + 1 / seconds
    return {k: round(v, 2) for k, v in rates.items()}


def recovery(h: Harness, system: System) -> None:
    """n leases claimed through the API expire while a fresh worker is up: how long until all
    are back in pending (none left expired in active), and until all have run again."""
    plan = h.plan
    h.redis.flush()
    deadline_ms = anyio.run(_claim_all, h.redis.url, plan.recovery_n, plan.recovery_lease_ms)
    cfg = {
        "mode": "drain",
        "n": plan.recovery_n,
        "concurrency": plan.recovery_concurrency,
        "settings": {"beat_ms": plan.recovery_beat_ms},
    }
    active = f"emq:{{{QUEUE}}}:active"
    with h.launch(system, cfg, h.cores.worker) as proc:
        proc.wait("ready", READY_TIMEOUT_S)
        if time.time() * 1000 > deadline_ms:
            raise BenchError("the worker was not up before the leases expired; raise the lease")
        while h.redis.client.zcount(active, "-inf", deadline_ms) > 0:
            time.sleep(BACK_POLL_S)
        back_at = time.time()
        done = proc.wait("done", drain_timeout(plan.recovery_n))
        proc.finish()
    h.record(system, "recovery.back_s", back_at - deadline_ms / 1000)
    h.record(system, "recovery.rerun_s", done["last_finish"] - deadline_ms / 1000)


async def _claim_all(url: str, n: int, lease_ms: int) -> float:
    """Enqueue n no-op jobs and claim them all with a short lease; the latest deadline (ms)."""
    async with Producer.from_url(url) as producer:
        for start in range(0, n, 1000):
            await producer.enqueue_many(QUEUE, [JobSpec("noop")] * min(1000, n - start))
        queue = producer.queue(QUEUE)
        result = await queue.claim(n, lease_ms)
        if len(result.jobs) != n:
            raise BenchError(f"claimed {len(result.jobs)} of {n} jobs")
        last = await producer.client.zrange(queue.keys.active, -1, -1, withscores=True)
        return float(last[0][1])
