"""What every scenario works with: the server, the pinning, the plan, the results, the runners."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import System
from bench.pinning import Cores
from bench.plan import Plan
from bench.procs import Proc
from bench.report import Results
from bench.server import BenchRedis

QUEUE = "bench"
FILL_TIMEOUT_S = 600.0


@dataclass(slots=True)
class Harness:
    redis: BenchRedis
    cores: Cores
    plan: Plan
    results: Results
    logs: Path
    uvloop: bool

    def launch(self, system: System, cfg: dict[str, Any], core: int | None) -> Proc:
        full = {"url": self.redis.url, "queue": QUEUE, "uvloop": self.uvloop, **cfg}
        return Proc(system.command(), full, core, self.logs / f"{system.name}.log")

    def fill(self, system: System, n: int, task: str, kwargs: dict[str, Any] | None = None) -> None:
        """Pre-enqueue n jobs with the system's own producer (on the worker's core: no worker
        runs yet)."""
        cfg = {
            "mode": "fill",
            "n": n,
            "task": task,
            "kwargs": kwargs or {},
            "width": self.plan.enqueue_width,
        }
        with self.launch(system, cfg, self.cores.worker) as proc:
            proc.wait("done", FILL_TIMEOUT_S)
            proc.finish()

    def record(self, system: System, metric: str, value: float | None) -> None:
        self.results.record(system.name, metric, value)

    def note(self, system: System, key: str, value: Any) -> None:
        self.results.note(system.name, key, value)
