"""How big each scenario is: the full run and `--quick` (a smoke test well under a minute)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SCENARIOS = (
    "enqueue",
    "drain",
    "sleep",
    "realistic",
    "latency",
    "roundtrips",
    "renewal",
    "recovery",
    "rss",
)
"""enqueue (1); drain = no-op drain (2) with CPU, commands (7) and round trips per job; sleep =
1 ms-sleep drain (3); realistic = drains of jobs whose body makes one Redis call on its own
client (an INCR), then the same with 1 ms of CPU after it; latency (4); roundtrips = top-level
commands per job by MONITOR;
renewal (5) and recovery (6) are emq-worker only; rss (8)."""


@dataclass(frozen=True, slots=True)
class Plan:
    repeat: int
    drain_n: int
    noop_concurrencies: tuple[int, ...]
    sleep_concurrencies: tuple[int, ...]
    enqueue_single: int
    enqueue_concurrent: int
    enqueue_bulk: int
    enqueue_width: int = 50
    """Single enqueues in flight at once in the concurrent measurement (and in pre-fills)."""
    bulk_batch: int = 1_000
    idle_probes: int = 100
    idle_rate: float = 50.0
    load_probes: int = 2_000
    load_rate: float = 500.0
    latency_concurrency: int = 100
    realistic_concurrency: int = 100
    realistic_tasks: tuple[str, ...] = ("incr", "incr_handler", "incr_cpu1ms")
    """Bodies of the realistic scenario: one INCR on the body's own client, the same on the
    client the framework hands its jobs, then the own-client INCR with 1 ms of CPU after it."""
    realistic_cpu_share: int = 4
    """The 1 ms-of-CPU variant drains drain_n / this many jobs (it runs under 1 000 jobs/s)."""
    monitor_n: int = 2_000
    renew_ks: tuple[int, ...] = (100, 1_000, 10_000)
    renew_lease_ms: int = 3_000
    renew_every_ms: int = 1_000
    renew_window_s: float = 3.2
    recovery_n: int = 10_000
    recovery_lease_ms: int = 2_000
    recovery_beat_ms: int = 1_000
    recovery_concurrency: int = 100
    rss_k: int = 10_000
    hold_s: float = 3_600.0
    drain_caps: tuple[tuple[str, int], ...] = ()
    """Smaller drains for the slowest systems, as (system, jobs): a drain of drain_n jobs at a
    few hundred jobs/s takes minutes, and jobs/s is as well measured over fewer."""

    def drain_size(self, system: str) -> int:
        """How many jobs a drain of `system` takes."""
        return min([self.drain_n, *(n for name, n in self.drain_caps if name == system)])


FULL = Plan(
    repeat=3,
    drain_n=20_000,
    noop_concurrencies=(100, 1_000),
    sleep_concurrencies=(100, 1_000),
    enqueue_single=5_000,
    enqueue_concurrent=10_000,
    enqueue_bulk=20_000,
)

QUICK = Plan(
    repeat=1,
    drain_n=1_000,
    noop_concurrencies=(100, 1_000),
    sleep_concurrencies=(100, 1_000),
    enqueue_single=500,
    enqueue_concurrent=1_000,
    enqueue_bulk=2_000,
    idle_probes=20,
    load_probes=250,
    monitor_n=300,
    renew_ks=(100, 1_000),
    renew_lease_ms=900,
    renew_every_ms=300,
    renew_window_s=1.0,
    recovery_n=1_000,
    recovery_lease_ms=1_200,
    rss_k=1_000,
)

PUBLISH = dataclasses.replace(
    FULL,
    noop_concurrencies=(100,),
    sleep_concurrencies=(1_000,),
    realistic_tasks=("incr", "incr_handler"),
    drain_caps=(("bullmq_py", 4_000),),
)
"""What `python -m bench --publish` runs (with PUBLISHED_SCENARIOS): the full plan cut to the
measurements README's headline table shows, so that every system fits in about 20 minutes on
a quiet 2-core machine (estimated from each system's jobs/s: the slowest peers' drains of
20 000 jobs, ~20 s each, are most of it; a loaded machine takes several times as long). BullMQ's
Python port, which joined later, drains 4 000 jobs (drain_caps): at its 119-733 jobs/s in
`python -m bench --quick --only bullmq_py`, 20 000 would have added some 15 minutes."""
PUBLISHED_SCENARIOS = ("drain", "sleep", "realistic", "latency")
PLANS = {"full": FULL, "quick": QUICK, "publish": PUBLISH}
