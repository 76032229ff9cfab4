"""What the worker exposes to Prometheus: the instruments fed while it runs and the collector
that reads them when scraped.

- `BeatNotifier` notes when the beat last ran (for `emq_beat_lag_seconds` and `/healthz`).
- `WorkerCollector` turns the worker's `Counters`, lease book, beat, event-loop lag and the last
  queue depths into metric families, so the job path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sized
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from emq_worker.observe.clock import Clock
from emq_worker.observe.looplag import LoopLag
from emq_worker.observe.metrics import DURATION_BUCKETS, Counters
from emq_worker.observe.sdnotify import Notifier
from emq_worker.protocol.lane_verbs import LanesView
from emq_worker.protocol.values import Counts

DURATION_LE = (*(repr(float(bound)) for bound in DURATION_BUCKETS), "+Inf")
"""The `le` labels of emq_job_duration_seconds, as prometheus-client writes them."""


class BeatNotifier(Notifier):
    """Passes everything to the service manager's notifier and notes when the beat last ran
    (the supervisor pings the watchdog once per pass)."""

    def __init__(self, inner: Notifier, clock: Clock, beat_s: float, grace_s: float) -> None:
        super().__init__(clock=clock)
        self.inner = inner
        self.clock = clock
        self.beat_s = beat_s
        self.grace_s = grace_s
        """How long the beat may pause beyond its cadence (the longest reconnect backoff)."""
        self.last_beat: float | None = None

    @property
    def enabled(self) -> bool:
        return self.inner.enabled

    def ready(self, status: str | None = None) -> None:
        self.inner.ready(status)

    def status(self, text: str) -> None:
        self.inner.status(text)

    def watchdog(self) -> None:
        self.last_beat = self.clock.monotonic()
        self.inner.watchdog()

    def stopping(self, status: str | None = None) -> None:
        self.inner.stopping(status)

    def close(self) -> None:
        self.inner.close()


class WorkerCollector(Collector):
    """Reads the worker's counters, lease book, beat and last queue depths when scraped."""

    def __init__(self, counters: Counters, book: Sized, beat: BeatNotifier) -> None:
        self.counters = counters
        self.book = book
        self.beat = beat
        self.depths: dict[str, Counts] = {}
        self.lanes: dict[str, LanesView] = {}
        self.loop_lag: LoopLag | None = None

    def collect(self) -> Iterable[Metric]:
        yield from _job_metrics(self.counters)
        yield from _lease_metrics(self.counters)
        yield GaugeMetricFamily("emq_jobs_in_flight", "Leases held now.", value=len(self.book))
        if self.beat.last_beat is not None:
            lag = self.beat.clock.monotonic() - self.beat.last_beat
            yield GaugeMetricFamily("emq_beat_lag_seconds", "Seconds since the beat last ran.", lag)
        if self.loop_lag is not None:
            yield from _loop_lag_metrics(self.loop_lag)
        if self.depths:
            yield _depth_metric(self.depths)
        if any(view.groups for view in self.lanes.values()):
            yield from _lane_metrics(self.lanes)


@dataclass(frozen=True, slots=True)
class Exposition:
    """What /metrics serves: the worker's collector, registered in `registry` beside the
    renewal sweep's instruments."""

    collector: WorkerCollector
    registry: CollectorRegistry

    def latest(self, depths: dict[str, Counts], lanes: dict[str, LanesView]) -> bytes:
        """The text exposition, with the queue depths and lanes just read."""
        self.collector.depths = depths
        self.collector.lanes = lanes
        return generate_latest(self.registry)


def _job_metrics(c: Counters) -> Iterable[Metric]:
    """What happened to the jobs: leased, settled (per queue and task), how long they ran."""
    yield _counter("emq_jobs_claimed", "Jobs this worker leased.", c.claimed)
    yield _counter(
        "emq_jobs_handed_off",
        "Of the jobs leased, those an enqueue handed straight to this worker's offer.",
        c.handed_off,
    )
    yield _counter("emq_jobs_completed", "Jobs whose completion was written.", c.completed)
    yield _counter("emq_jobs_retried", "Failed jobs sent back for a retry.", c.retried)
    yield _counter(
        "emq_jobs_failed", "Deprecated: the old name of emq_jobs_retried_total.", c.retried
    )
    dead = CounterMetricFamily(
        "emq_jobs_dead_lettered",
        "Jobs moved to dead: by a failure's settle, or by the reaper (attempts used up).",
        labels=["via"],
    )
    dead.add_metric(["settle"], c.dead_lettered)
    dead.add_metric(["reap"], c.reaped_dead)
    yield dead
    jobs = CounterMetricFamily(
        "emq_jobs",
        "Settled jobs per queue, task and outcome (completed, retried, dead_lettered).",
        labels=["queue", "task", "outcome"],
    )
    for labels, value in c.by_task.items():
        jobs.add_metric(labels, value)
    yield jobs
    events = CounterMetricFamily(
        "emq_queue_events",
        "Lease events per queue: claimed, reaped (back to pending or dead), fenced writes.",
        labels=["queue", "event"],
    )
    for (queue, event), count in c.by_queue.items():
        events.add_metric([queue, event], count)
    yield events
    durations = HistogramMetricFamily(
        "emq_job_duration_seconds",
        "Time the handler ran, per queue and task, for the jobs counted in emq_jobs_total.",
        labels=["queue", "task"],
    )
    for key, histogram in c.durations.items():
        durations.add_metric(
            key,
            list(zip(DURATION_LE, histogram.cumulative(), strict=True)),
            histogram.sum,
        )
    yield durations


def _lease_metrics(c: Counters) -> Iterable[Metric]:
    """What happened to the leases and the scheduled jobs the beat tends."""
    yield _counter("emq_leases_reaped", "Expired leases returned to pending.", c.reaped)
    yield _counter("emq_writes_fenced", "Writes refused: another holder owns the job.", c.fenced)
    yield _counter("emq_leases_lost", "Held leases the server reported lost.", c.leases_lost)
    yield _counter(
        "emq_leases_self_fenced", "Leases given up after renewals failed.", c.self_fenced
    )
    yield _counter("emq_jobs_promoted", "Scheduled jobs made pending.", c.promoted)
    yield _counter("emq_leases_released", "Leases handed back at shutdown.", c.released)
    yield _counter(
        "emq_renew_failures", "Renew calls that failed to reach Redis.", c.renew_failures
    )


def _depth_metric(depths: dict[str, Counts]) -> Metric:
    depth = GaugeMetricFamily(
        "emq_queue_depth",
        "Jobs per queue and state (read when scraped).",
        labels=["queue", "state"],
    )
    for name, counts in depths.items():
        for state in ("pending", "active", "scheduled", "dead"):
            depth.add_metric([name, state], getattr(counts, state))
    return depth


def _lane_metrics(lanes: dict[str, LanesView]) -> Iterable[Metric]:
    """Per queue with lanes: totals, and the deepest lanes (LANES_SHOWN at most: the number of
    series stays bounded however many groups a queue has)."""
    count = GaugeMetricFamily("emq_lanes", "Fair lanes (groups) found per queue.", labels=["queue"])
    waiting = GaugeMetricFamily(
        "emq_lanes_waiting", "Jobs waiting in a queue's lanes, every group.", labels=["queue"]
    )
    depth = GaugeMetricFamily(
        "emq_lane_depth",
        "Jobs waiting in each of a queue's deepest lanes (at most 10 per queue).",
        labels=["queue", "group"],
    )
    active = GaugeMetricFamily(
        "emq_lane_active",
        "Jobs leased now of each of a queue's deepest lanes (at most 10 per queue).",
        labels=["queue", "group"],
    )
    for name, view in lanes.items():
        if not view.groups:
            continue
        count.add_metric([name], view.groups)
        waiting.add_metric([name], view.waiting)
        for lane in view.deepest:
            depth.add_metric([name, lane.group], lane.waiting)
            active.add_metric([name, lane.group], lane.active)
    yield from (count, waiting, depth, active)


def _loop_lag_metrics(monitor: LoopLag) -> Iterable[Metric]:
    yield GaugeMetricFamily(
        "emq_event_loop_lag_seconds",
        "How late the latest event-loop probe woke (a blocked loop stalls lease renewal).",
        value=monitor.last_s,
    )
    yield GaugeMetricFamily(
        "emq_event_loop_lag_max_seconds", "The largest event-loop lag seen.", value=monitor.max_s
    )
    yield _counter(
        "emq_event_loop_stalls", "Probes that found the event loop blocked.", monitor.stalls
    )


def _counter(name: str, documentation: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)
