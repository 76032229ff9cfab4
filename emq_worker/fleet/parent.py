"""The parent: keeps N worker processes running, and is the service systemd sees.

- Each child runs `run` with the parent's command line (plan.py), in a session of its own, with
  the parent as its notify socket (channel.py): READY=1 once serving, WATCHDOG=1 from its beat.
- A child that exits is restarted after a backoff (child.py), unless the fleet is stopping, the
  exit says a restart cannot help (usage, credentials, ACL: the fleet stops with that code), or
  it finished a `--burst`.
- A ready child silent for the watchdog interval (systemd's WatchdogSec, else 30 s) is wedged:
  it is killed (SIGKILL) and so restarted; its leases come back through the reaper.
- The first SIGTERM/SIGINT is sent on to every child as SIGTERM (each finishes or hands back its
  held jobs); a second is sent on as a second SIGTERM (each stops at once). The parent exits once
  every child has.
- systemd hears READY=1 once every child is ready, WATCHDOG=1 while every child is ready and
  speaking, STATUS= with how many are, STOPPING=1 on the stop.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import anyio

from emq_worker.fleet.channel import NotifyChannel
from emq_worker.fleet.child import FATAL_EXITS, Child, ChildState, exit_text
from emq_worker.fleet.http import FleetEndpoint
from emq_worker.fleet.plan import DEFAULT_WATCHDOG_S, FleetPlan, child_environ
from emq_worker.observe.clock import Clock, MonotonicClock
from emq_worker.observe.http import HttpBindError
from emq_worker.observe.log import get_logger
from emq_worker.observe.sdnotify import Notifier

MONITOR_EVERY_S = 1.0
EXIT_FAILED = 1


class Fleet:
    def __init__(
        self,
        plan: FleetPlan,
        environ: Mapping[str, str],
        notifier: Notifier,
        pid: int,
        clock: Clock | None = None,
    ) -> None:
        self.plan = plan
        self.environ = environ
        self.notifier = notifier
        self.pid = pid
        self.clock = clock or MonotonicClock()
        self.watchdog_s = notifier.watchdog_s or DEFAULT_WATCHDOG_S
        self.children = [Child(index) for index in range(plan.processes)]
        self.stop = anyio.Event()
        self.exit_code = 0
        self.log = get_logger()
        self._ready_sent = False
        self._status = ""

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()

    async def run(self) -> int:
        """Run the fleet until every child has exited; the exit code."""
        with tempfile.TemporaryDirectory(prefix="emq-worker-") as directory:
            channels = [NotifyChannel(Path(directory), c.index) for c in self.children]
            try:
                await self._serve(channels)
            finally:
                for channel in channels:
                    channel.close()
        self.log.info("fleet_stopped", exit_code=self.exit_code)
        return self.exit_code

    async def _serve(self, channels: list[NotifyChannel]) -> None:
        pairs = list(zip(self.children, channels, strict=True))
        async with anyio.create_task_group() as background:
            background.start_soon(self._watch_signals)
            for child, channel in pairs:
                background.start_soon(self._listen, child, channel)
            if self.plan.http is not None:
                await background.start(FleetEndpoint(self.plan.http, self).serve)
            background.start_soon(self._monitor)
            self.log.info(
                "fleet_started", processes=len(pairs), pid=self.pid, watchdog_s=self.watchdog_s
            )
            async with anyio.create_task_group() as keepers:
                for child, channel in pairs:
                    keepers.start_soon(self._keep, child, channel)
            background.cancel_scope.cancel()

    async def _keep(self, child: Child, channel: NotifyChannel) -> None:
        """Run the child in its slot, again after each exit, until the fleet stops."""
        while not self.stopping and child.state is not ChildState.DONE:
            channel.drain()
            code = await self._run_once(child, channel)
            delay = child.exited(self.clock.monotonic())
            if self._exited(child, code):
                return
            child.restarts += 1
            self.log.warning(
                "worker_process_restarting",
                process=child.index,
                in_ms=int(delay * 1000),
                quick_exits=child.quick_exits,
            )
            with anyio.move_on_after(delay):
                await self.stop.wait()

    async def _run_once(self, child: Child, channel: NotifyChannel) -> int:
        env = child_environ(self.environ, channel.address, self.watchdog_s, self.pid, child.index)
        process = await anyio.open_process(
            self.plan.command(child.index),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=None,
            stderr=None,
            start_new_session=True,
        )
        child.spawned(process, self.clock.monotonic())
        self.log.info("worker_process_started", process=child.index, pid=process.pid)
        if self.stopping:  # the stop came while it was being started
            process.send_signal(signal.SIGTERM)
        try:
            return await process.wait()
        finally:
            if process.returncode is None:  # the parent itself is failing: stop the child
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
            with anyio.CancelScope(shield=True):
                await process.aclose()

    def _exited(self, child: Child, code: int) -> bool:
        """Log the exit; True when the slot is not to be filled again."""
        quiet = self.stopping and code in (0, 128 + signal.SIGTERM, -signal.SIGTERM)
        log = self.log.info if quiet or (code == 0 and self.plan.burst) else self.log.warning
        log(
            "worker_process_exited",
            process=child.index,
            pid=child.pid,
            exit_code=code,
            reason=exit_text(code),
            wedged=child.wedged,
        )
        if code in FATAL_EXITS and not self.stopping:
            self.log.error("fleet_failed", process=child.index, reason=exit_text(code))
            self.exit_code = code
            child.state = ChildState.DONE
            self.request_stop()
        elif code == 0 and self.plan.burst:
            child.state = ChildState.DONE
        return self.stopping or child.state is ChildState.DONE

    def request_stop(self) -> None:
        """Graceful: every child finishes or hands back its held jobs; none is restarted."""
        if self.stopping:
            return
        self.stop.set()
        self.notifier.stopping("stopping: worker processes finish or hand back their jobs")
        self._signal_children(signal.SIGTERM)

    def _signal_children(self, signum: signal.Signals) -> None:
        for child in self.children:
            process = child.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            received = 0
            async for signum in signals:
                received += 1
                name = signal.Signals(signum).name
                if received == 1:
                    self.log.info("shutdown_requested", signal=name, processes=len(self.children))
                    self.request_stop()
                else:  # a second SIGTERM stops each child at once, leases left to the reaper
                    self.log.warning("shutdown_forced", signal=name)
                    self.exit_code = 128 + signum
                    self._signal_children(signal.SIGTERM)

    async def _listen(self, child: Child, channel: NotifyChannel) -> None:
        while True:
            lines = await channel.receive()
            if child.hear(lines, self.clock.monotonic()):
                self.log.info("worker_process_ready", process=child.index, pid=child.pid)
                self._report()

    async def _monitor(self) -> None:
        """Kill wedged children; keep systemd told (READY, WATCHDOG, STATUS)."""
        every = min(MONITOR_EVERY_S, self.watchdog_s / 8)
        while True:
            now = self.clock.monotonic()
            for child in self.children:
                silence = child.silent_for(now, self.watchdog_s)
                if silence is not None and not child.wedged and child.process is not None:
                    child.wedged = True
                    self.log.error(
                        "worker_process_wedged",
                        process=child.index,
                        pid=child.pid,
                        silent_s=round(silence, 1),
                        watchdog_s=self.watchdog_s,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        child.process.kill()
            self._report()
            await anyio.sleep(every)

    def unhealthy(self) -> str | None:
        """Why the fleet is not all there (None: every child is ready and speaking)."""
        if self.stopping:
            return None
        now = self.clock.monotonic()
        for child in self.children:
            if child.state is ChildState.DONE:
                continue
            if child.state is not ChildState.READY:
                return f"process {child.index} is {child.state}"
            if child.silent_for(now, self.watchdog_s) is not None:
                return f"process {child.index} (pid {child.pid}) has gone silent"
        return None

    def _report(self) -> None:
        done = (ChildState.READY, ChildState.DONE)
        ready = sum(child.state in done for child in self.children)
        total = len(self.children)
        if not self._ready_sent and ready == total and not self.stopping:
            self._ready_sent = True
            self.log.info("fleet_ready", processes=total)
            self.notifier.ready(f"{total} worker processes ready")
        if self.unhealthy() is None:
            self.notifier.watchdog()
        restarts = sum(child.restarts for child in self.children)
        status = f"{ready} of {total} worker processes ready; {restarts} restarts"
        if status != self._status:
            self._status = status
            self.notifier.status(status)


def run(plan: FleetPlan, environ: Mapping[str, str], notifier: Notifier, pid: int) -> int:
    """Run the fleet on asyncio; the exit code."""

    async def main() -> int:
        return await Fleet(plan, environ, notifier, pid).run()

    try:
        return anyio.run(main)
    except BaseExceptionGroup as group:
        # e.g. the --http port is taken (HttpBindError): no child was started
        error = group.subgroup((OSError, HttpBindError))
        if error is None or error.exceptions != group.exceptions or len(error.exceptions) != 1:
            raise
        get_logger().error("fleet_failed", error=str(error.exceptions[0]))
        return EXIT_FAILED
