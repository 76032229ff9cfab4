"""One assembly point: every part of a running worker is built here, once, and handed the parts it
works with. Nothing else constructs a runtime component, and no part reaches through another to
a third (the worker closes the process pool it was given, not `supervisor.runner.pool`).

    state   settings, queues, counters, clock, random source, lease book, slot signal, stop
    batcher     writes outcomes (settle.py)             <- state
    runner      runs each job (runner.py)               <- state, app, batcher
    beat parts  agenda, wake waiter, upkeep, isolation, offers, drainer, history, status
    supervisor  the beat (supervisor.py)                <- state, beat parts
    sweep       renewal (renewal.py)                    <- state, renewal lines
    http        /metrics, /healthz, /readyz (optional)  <- the counters, the book, the beat
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from emq_worker.jobs.process_pool import ProcessPool
from emq_worker.jobs.repeat import RepeatFirer
from emq_worker.jobs.tasks import App
from emq_worker.observe.exposition import BeatNotifier, Exposition, WorkerCollector
from emq_worker.observe.http import HttpEndpoint
from emq_worker.observe.log import get_logger
from emq_worker.observe.looplag import LoopLag
from emq_worker.observe.sdnotify import Notifier
from emq_worker.observe.status import BeatStatus
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.runtime.agenda import Agenda, check_window_s, quiet_budget_s
from emq_worker.runtime.drain import BeatGuides, Drainer
from emq_worker.runtime.history_flush import HistoryRecorder
from emq_worker.runtime.isolation import QueueIsolation
from emq_worker.runtime.offers import Offers, offer_ms
from emq_worker.runtime.presence import WorkerRegistry
from emq_worker.runtime.queue_health import BACKOFF_CAP_S
from emq_worker.runtime.queue_upkeep import QueueUpkeep
from emq_worker.runtime.renewal import MeteredSweep, RenewalSweep
from emq_worker.runtime.renewal_lines import RenewalLines
from emq_worker.runtime.runner import JobRunner
from emq_worker.runtime.settle import SettleBatcher
from emq_worker.runtime.state import WorkerState
from emq_worker.runtime.supervisor import BeatParts, Supervisor
from emq_worker.runtime.wakes import WakeWaiter


@dataclass(frozen=True, slots=True)
class Connections:
    """What the worker talks to the server through."""

    client: Redis
    lines: RenewalLines | None
    """The renewal's own connections; None: the client's pool carries the renewals."""


@dataclass(frozen=True, slots=True)
class Observers:
    """Who hears how the worker is doing."""

    notifier: Notifier
    registry: WorkerRegistry
    loop_lag: LoopLag
    stopping: Callable[[], bool]


@dataclass(frozen=True, slots=True)
class Parts:
    state: WorkerState
    batcher: SettleBatcher
    pool: ProcessPool
    supervisor: Supervisor
    history: HistoryRecorder
    sweep: RenewalSweep
    http: HttpEndpoint | None = None


def assemble(state: WorkerState, app: App, connections: Connections, observers: Observers) -> Parts:
    """The worker's runtime, built once (see the module's map)."""
    settings = state.settings
    batcher = SettleBatcher(state)
    runner = JobRunner(state, app, batcher)
    metrics = CollectorRegistry(auto_describe=True) if settings.http else None
    beat_notifier = (
        BeatNotifier(observers.notifier, state.clock, settings.beat_ms / 1000, BACKOFF_CAP_S)
        if metrics is not None
        else None
    )
    beat = _beat_parts(state, app, connections.client, runner, observers, beat_notifier)
    supervisor = Supervisor(state, beat)
    if metrics is None or beat_notifier is None:
        sweep = RenewalSweep(state, connections.lines)
        return Parts(state, batcher, runner.pool, supervisor, beat.history, sweep)
    metered = MeteredSweep(state, connections.lines).meter(metrics)
    collector = WorkerCollector(state.counters, state.book, beat_notifier)
    collector.loop_lag = observers.loop_lag
    metrics.register(collector)
    assert settings.http is not None
    exposition = Exposition(collector, metrics)
    http = HttpEndpoint(
        settings.http, connections.client, state.queues, exposition, observers.stopping
    )
    return Parts(state, batcher, runner.pool, supervisor, beat.history, metered, http)


def _beat_parts(
    state: WorkerState,
    app: App,
    client: Redis,
    runner: JobRunner,
    observers: Observers,
    beat_notifier: BeatNotifier | None,
) -> BeatParts:
    settings = state.settings
    queues = list(state.queues.values())
    names = [queue.name for queue in queues]
    log = get_logger()
    notifier = beat_notifier or observers.notifier
    status = BeatStatus(notifier, names, settings.concurrency, log)
    beat_s = settings.beat_ms / 1000
    window_s = check_window_s(
        len(queues), beat_s, settings.lease_ms / 1000, settings.check_window_ms / 1000
    )
    budget_s = quiet_budget_s(settings.lease_ms / 1000, beat_s, settings.idle_park_ms / 1000)
    agenda = Agenda(names, window_s, beat_s, state.rng, budget_s)
    wakes = WakeWaiter(client)
    repeats = RepeatFirer(SnowflakeMinter(settings.node_id))
    reap_cap = app.most_attempts(settings.max_attempts)
    upkeep = QueueUpkeep(state, reap_cap, log, agenda, repeats)
    isolation = QueueIsolation(client, queues, state.clock, state.rng, log)
    spans_slots = wakes.spans_slots([queue.keys.wake for queue in queues])
    offers = Offers(queues, offer_ms(settings, spans_slots))
    guides = BeatGuides(agenda, isolation, offers, status)
    drainer = Drainer(state, runner, guides)
    registry = observers.registry
    history = HistoryRecorder(state.counters, registry.id, settings.history_every_ms)
    return BeatParts(client, guides, wakes, upkeep, drainer, history, notifier, registry)
