"""The daemon: runs a Worker (over the partitions of partitioned queues: runtime/partitioned.py)
under signal handling and turns its end into an exit code.

The first SIGTERM/SIGINT is graceful (finish or hand back held jobs, exit 0); a second one stops at
once and leaves held leases to the reaper. Signals are received in a task, never in a handler.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import signal
from dataclasses import dataclass

import anyio
from redis.exceptions import RedisError

from emq_worker.errors import EmqError
from emq_worker.jobs.tasks import App
from emq_worker.observe.log import get_logger
from emq_worker.observe.sdnotify import Notifier
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.partitioned import PartitionedWorker
from emq_worker.valkey import failures
from emq_worker.valkey.reach import reach

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_AUTH = failures.EXIT_AUTH
"""3: Redis refused the credentials (WRONGPASS, NOAUTH)."""
EXIT_NOPERM = failures.EXIT_NOPERM
"""4: the ACL user lacks a command or key pattern the worker needs (NOPERM)."""
GC_YOUNG_THRESHOLD = 20_000


@dataclass(slots=True)
class ExitStatus:
    exit_code: int = EXIT_OK


async def _watch_signals(
    worker: PartitionedWorker, outcome: ExitStatus, graceful: signal.Signals | None = None
) -> None:
    log = get_logger()
    watched = (signal.SIGTERM, signal.SIGINT, *([graceful] if graceful else []))
    with anyio.open_signal_receiver(*watched) as signals:
        received = 0
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == graceful:  # however often it comes: never a forced stop
                log.info("shutdown_requested", signal=name, grace_ms=worker.settings.grace_ms)
                worker.request_stop()
                continue
            received += 1
            if received == 1:
                log.info("shutdown_requested", signal=name, grace_ms=worker.settings.grace_ms)
                worker.request_stop()
            else:
                log.warning("shutdown_forced", signal=name)
                outcome.exit_code = 128 + signum
                worker.force_stop()


async def serve(
    settings: WorkerSettings,
    app: App,
    notifier: Notifier | None = None,
    graceful: signal.Signals | None = None,
) -> int:
    """Serve until stopped; the exit code. `graceful` is a signal that asks for a graceful stop
    however often it is received (a `--processes` child's parent-death signal: Linux sends it
    again at each step of the child's reparenting)."""
    wait_s = settings.connect_wait_ms / 1000
    timeout_s = settings.check_timeout_ms / 1000
    await reach(settings.address, settings.wire_version, get_logger(), wait_s, timeout_s)
    worker = PartitionedWorker(settings, app, notifier=notifier)
    outcome = ExitStatus()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_watch_signals, worker, outcome, graceful)
            await worker.run()
            group.cancel_scope.cancel()
    except BaseExceptionGroup as group_error:
        error = _sole_emq_error(group_error)
        raise error from error.__cause__  # the cause decides the exit code (e.g. NOPERM)
    return outcome.exit_code


def _sole_emq_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one EmqError or RedisError a task group raised (so the CLI can print it plainly),
    else the group."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        else:
            leaves.append(error)
    if len(leaves) == 1 and isinstance(leaves[0], EmqError | RedisError):
        return leaves[0]
    return group


def tune_runtime() -> None:
    """Process-wide settings for a long-running worker, applied once the app is imported.

    Everything imported so far (the app, its libraries) is moved out of the collector's sight,
    and the youngest generation is collected less often: a job makes a few short-lived
    reference cycles (task, coroutine, timeout handle), and the default threshold of 700 spends
    about a tenth of a busy worker's CPU collecting them.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run(settings: WorkerSettings, app: App, graceful: signal.Signals | None = None) -> int:
    """Run the daemon on asyncio, with uvloop's faster event loop where it is installed.

    Under systemd (`Type=notify`) it tells the service manager through `$NOTIFY_SOCKET` when it
    is ready, what it holds, that its beat is alive (watchdog) and when it stops: the variables
    systemd sets for this process are read here, at the process's edge, not by the library.
    """
    tune_runtime()
    use_uvloop = importlib.util.find_spec("uvloop") is not None
    with Notifier.from_environ(os.environ) as notifier:
        return anyio.run(
            serve, settings, app, notifier, graceful, backend_options={"use_uvloop": use_uvloop}
        )
