"""What every runner shares; the standard library only (peer runners import it in their venvs).

A runner is started as `python -m bench.runners.<system>_runner '<json config>'` and reports by
printing one JSON object per line on stdout: `{"event": "...", ...}`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def config() -> dict[str, Any]:
    """The JSON config given as the single command-line argument."""
    loaded: dict[str, Any] = json.loads(sys.argv[1])
    return loaded


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process from /proc/<pid>/stat (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def sched_seconds() -> tuple[float, float]:
    """(seconds on a CPU, seconds waiting for one) of this process's threads, from
    /proc/self/task/*/schedstat; (0, 0) where the kernel keeps no schedstat. What is neither is
    the time the process had nothing to run: its event loop waited on I/O."""
    on_cpu = waiting = 0
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/schedstat") as f:
                ran, waited, _ = f.read().split()
            on_cpu, waiting = on_cpu + int(ran), waiting + int(waited)
    except OSError:
        return 0.0, 0.0
    return on_cpu / 1e9, waiting / 1e9


def memory_kb(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in kB."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(rest.split()[0])
    return found


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of `values` (p in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


class Sends:
    """Requests this process wrote to Redis: one per command sent alone, one per pipeline.

    A request is one round trip. `count_sends()` installs the count on redis-py's asyncio
    connection class, which all three systems use, so the same definition holds for each.
    `body` counts those a job body sent on its own client (`Body`): a drain reports the
    worker's own round trips, without them.
    """

    count = 0
    body = 0


BODY_KEY = "bench:body:counter"
CPU_WORK_S = 0.001


class Body:
    """The realistic job body: one INCR on the body's own asyncio client (a redis-py client with
    its default pool, as a handler touching a store would hold), and optionally ~1 ms of CPU.

    The client is made on first use, in the worker's loop; `Body.url` is set by the runner. Each
    system's venv has its own redis-py (arq pins 5.x, SAQ 7.x, emq-worker's has 8.x), and 8.x
    defaults to a 5 s socket timeout, which wraps every send in `asyncio.wait_for` (an extra task
    per command): the body asks for no socket timeout, the default of the other two, so that it
    costs every system the same.
    """

    url = os.environ.get("EMQ_REDIS_URL", "redis://localhost:6379/0")
    """The runners set it from their config; this default serves `emq-worker run` by hand."""
    client: Any = None

    @classmethod
    async def incr(cls) -> None:
        if cls.client is None:
            from redis.asyncio import Redis

            cls.client = Redis.from_url(cls.url, socket_timeout=None)
        Sends.body += 1
        await cls.client.incr(BODY_KEY)

    @staticmethod
    def burn_cpu(seconds: float = CPU_WORK_S) -> None:
        """Spin for `seconds` of this thread's CPU time (the same work on every machine's clock)."""
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass


def count_sends() -> None:
    from redis.asyncio.connection import AbstractConnection

    original = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        Sends.count += 1
        await original(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


@dataclass(slots=True)
class Tally:
    """Counts handler starts and latency probes inside a worker process.

    `first_start`/`cpu_at_first_start` mark the start of a drain; the runner marks its end once
    the worker's own completion count reaches n (after the settle, not after the handler).
    """

    n: int
    started: int = 0
    first_start: float = 0.0
    cpu_at_first_start: float = 0.0
    sends_at_first_start: int = 0
    body_at_first_start: int = 0
    sched_at_first_start: tuple[float, float] = (0.0, 0.0)
    latencies_ms: list[float] = field(default_factory=list)
    on_all_started: Callable[[], None] | None = None

    def start(self) -> None:
        if self.started == 0:
            self.first_start = time.time()
            self.cpu_at_first_start = cpu_seconds()
            self.sends_at_first_start = Sends.count
            self.body_at_first_start = Sends.body
            self.sched_at_first_start = sched_seconds()
        self.started += 1
        if self.started == self.n and self.on_all_started is not None:
            self.on_all_started()

    def probe(self, enqueued_at: float) -> None:
        self.latencies_ms.append((time.time() - enqueued_at) * 1000)
        self.start()

    def done_fields(self, completed: int) -> dict[str, Any]:
        """What a drain reports when its n-th job has been settled."""
        on_cpu, waiting = sched_seconds()
        return {
            "on_cpu_s": on_cpu - self.sched_at_first_start[0],
            "cpu_wait_s": waiting - self.sched_at_first_start[1],
            "completed": completed,
            "first_start": self.first_start,
            "last_finish": time.time(),
            "cpu_s": cpu_seconds() - self.cpu_at_first_start,
            "sends": Sends.count - self.sends_at_first_start,
            "body_sends": Sends.body - self.body_at_first_start,
        }

    def latency_fields(self) -> dict[str, Any]:
        lat = self.latencies_ms
        return {
            "count": len(lat),
            "p50_ms": percentile(lat, 50) if lat else None,
            "p99_ms": percentile(lat, 99) if lat else None,
            "max_ms": max(lat) if lat else None,
        }


def exit_on_crash(task: Any) -> None:
    """A done-callback for a peer worker's asyncio task: report a crash and leave at once."""
    if not task.cancelled() and task.exception() is not None:
        emit("error", error=repr(task.exception()))
        finish()


def finish() -> None:
    """Leave at once once the last report is out: teardown is not measured, and a peer's
    graceful stop (or a blocked BLMOVE on a thousand connections) would only slow the run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def paced(count: int, rate: float, send: Callable[[float], Any]) -> None:
    """Call `await send(enqueued_at)` `count` times at `rate` per second (on a fixed schedule;
    a late send goes at once instead of drifting the schedule)."""
    import asyncio

    start = time.monotonic()
    for i in range(count):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(time.time())


async def concurrently(count: int, width: int, send: Callable[[], Any]) -> None:
    """Call `await send()` `count` times with at most `width` calls in flight."""
    import asyncio

    remaining = count

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await send()

    await asyncio.gather(*(lane() for _ in range(min(width, count))))


def maybe_uvloop(cfg: dict[str, Any]) -> None:
    """Install uvloop's event loop policy when the run asked for it (all systems or none)."""
    if cfg.get("uvloop"):
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        uvloop.install()


GC_YOUNG_THRESHOLD = 20_000
"""The young-generation threshold `emq-worker run` sets (emq_worker/runtime/daemon.py, kept equal
by tests/test_bench_fairness.py): every runner sets it too, so no system runs tuned alone."""


def tune_runtime() -> None:
    """What `emq-worker run` does to the runtime once the app is imported, done for every system
    alike (standard library only): freeze what is imported so far out of the collector's sight,
    and collect the youngest generation less often."""
    import gc

    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


StartWorker = Callable[[dict[str, Any], int], Coroutine[Any, Any, tuple[Any, Any, Any]]]
"""A peer runner's `start_worker(cfg, n)`: (worker, all_started event, all_done event)."""


async def drain_with(
    start_worker: StartWorker, completed: Callable[[Any], int], tally: Any, cfg: dict[str, Any]
) -> None:
    """Drain cfg["n"] jobs with a peer's worker and report the tally."""
    worker, all_started, all_done = await start_worker(cfg, cfg["n"])
    emit("ready", **memory_kb())
    await all_started.wait()
    await all_done.wait()
    fields = tally.latency_fields() if tally.latencies_ms else {}
    emit("done", **tally.done_fields(completed(worker)), **fields)
    finish()


async def hold_with(start_worker: StartWorker, cfg: dict[str, Any]) -> None:
    """Hold cfg["k"] long jobs; report RSS once all run, then keep holding until killed."""
    _, all_started, _ = await start_worker(cfg, cfg["k"])
    emit("ready", **memory_kb())
    await all_started.wait()
    emit("held", **memory_kb())
    await asyncio.Event().wait()


Mode = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]


def peer_modes(
    *,
    enqueue: Mode,
    fill: Mode,
    produce: Mode,
    start_worker: StartWorker,
    completed: Callable[[Any], int],
    tally: Any,
) -> dict[str, Mode]:
    """A peer runner's modes: its own producers, and drain/hold around its worker."""

    async def drain(cfg: dict[str, Any]) -> None:
        await drain_with(start_worker, completed, tally, cfg)

    async def hold(cfg: dict[str, Any]) -> None:
        await hold_with(start_worker, cfg)

    return {"enqueue": enqueue, "fill": fill, "produce": produce, "drain": drain, "hold": hold}


def run_peer(modes: dict[str, Mode]) -> None:
    """A peer runner's main: read the config, run the mode it names."""
    cfg = config()
    Body.url = cfg["url"]
    maybe_uvloop(cfg)
    tune_runtime()  # the same tuning as emq-worker's runner
    count_sends()
    asyncio.run(modes[cfg["mode"]](cfg))
    finish()
