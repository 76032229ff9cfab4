"""The parent's /metrics, /healthz and /readyz (`--http HOST:PORT` with `--processes N`).

Child i serves its own on HOST:PORT+1+i. The parent's /metrics fetches each child's and merges
them, each sample labelled `process="i"` (the slot, stable across restarts: a restarted child's
counters start over on the same series, which `rate()` reads as a counter reset), with the
parent's own `emq_worker_processes` and `emq_worker_process_restarts_total`. One scrape target
for the fleet; a child that does not answer in time is left out of that scrape. /healthz is 200
while every child is ready and its beat speaks (or the fleet is stopping); /readyz while every
child is ready and the fleet is not stopping.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from emq_worker.fleet.child import ChildState
from emq_worker.observe.http import ProbeServer, fetch, parse_host_port

if TYPE_CHECKING:
    from emq_worker.fleet.parent import Fleet

SCRAPE_TIMEOUT_S = 2.0
ANY_HOST = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
"""A child bound to every address is fetched on loopback."""


class FleetEndpoint(ProbeServer):
    def __init__(self, address: str, fleet: Fleet) -> None:
        super().__init__(address)
        self.fleet = fleet

    async def metrics(self) -> bytes:
        texts: dict[int, str] = {}
        async with anyio.create_task_group() as group:
            for child in self.fleet.children:
                group.start_soon(self._scrape, child.index, texts)
        families = merge(sorted(texts.items()))
        families.extend(self._own_metrics())
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Families(families))
        return generate_latest(registry)

    async def _scrape(self, index: int, texts: dict[int, str]) -> None:
        address = self.fleet.plan.child_http(index)
        if address is None:
            return
        host, port = parse_host_port(address)
        try:
            status, body = await fetch(ANY_HOST.get(host, host), port, "/metrics", SCRAPE_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            self.log.debug("fleet_scrape_failed", process=index, error=str(exc) or repr(exc))
            return
        if status == 200:
            texts[index] = body

    def _own_metrics(self) -> Iterable[Metric]:
        children = self.fleet.children
        states = GaugeMetricFamily(
            "emq_worker_processes", "Worker processes of this parent, by state.", labels=["state"]
        )
        for state in ChildState:
            states.add_metric([state.value], sum(child.state is state for child in children))
        restarts = CounterMetricFamily(
            "emq_worker_process_restarts",
            "Times the parent restarted the worker process in each slot.",
            labels=["process"],
        )
        for child in children:
            restarts.add_metric([str(child.index)], child.restarts)
        return [states, restarts]

    def health(self) -> str | None:
        return self.fleet.unhealthy()

    async def readiness(self) -> str | None:
        if self.fleet.stopping:
            return "stopping: worker processes finish or hand back their jobs"
        return self.fleet.unhealthy()


class Families:
    """A collector that yields metric families already built."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def merge(texts: Iterable[tuple[int, str]]) -> list[Metric]:
    """The families of several children's exposition text, each sample labelled with its
    child's `process` index."""
    merged: dict[str, Metric] = {}
    for index, text in texts:
        for family in text_string_to_metric_families(text):
            into = merged.get(family.name)
            if into is None:
                into = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = into
            for sample in family.samples:
                labels = {**sample.labels, "process": str(index)}
                into.add_sample(sample.name, labels, sample.value, sample.timestamp)
    return list(merged.values())
