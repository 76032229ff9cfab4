"""What `emq-worker dev` runs (no click here): a server of our own, a worker and the dashboard as
`emq-worker` subprocesses, the worker restarted when the app's files change, all of it stopped
(and a temporary data directory removed) on SIGINT or SIGTERM.

Every child runs in its own session: a Ctrl-C in the terminal reaches only this process, which
then stops the worker first (it hands its jobs back), the dashboard, and the server last.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from emq_worker.errors import ConfigError
from emq_worker.valkey.binary import is_embedded
from emq_worker.valkey.local import LocalServer, free_port, stop_process

# prog_name: a child's usage error reads `Usage: emq-worker run ...`, not `Usage: -c run ...`.
EMQ_WORKER = [
    sys.executable,
    "-c",
    "from emq_worker.cli.main import main; main(prog_name='emq-worker')",
]
STOP_TIMEOUT_S = 30.0
"""How long a stopped child may take (the worker lets running jobs finish) before SIGKILL."""
DASHBOARD_START_S = 15.0
POLL_S = 0.2
WATCH_TIMEOUT_MS = 200
"""How often the reload loop looks up from the file watcher (to see the worker or a signal)."""

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class DevPlan:
    app: str
    app_dir: str
    queues: tuple[str, ...]
    port: int | None
    persist: Path | None
    watch: tuple[Path, ...] = ()
    """The app's directories to watch: empty without --reload."""
    dashboard: bool = True


class Child:
    """One `emq-worker` subprocess, in its own session, sharing our stdout and stderr."""

    def __init__(self, name: str, args: Sequence[str], env: dict[str, str]) -> None:
        self.name = name
        self.args = list(args)
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.args, env=self.env, start_new_session=True)

    def exited(self) -> int | None:
        """Its exit code once it has exited, else None."""
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """SIGTERM (the worker drains), SIGKILL past STOP_TIMEOUT_S."""
        process, self.process = self.process, None
        stop_process(process, STOP_TIMEOUT_S)

    def restart(self) -> None:
        self.stop()
        self.start()


def app_paths(app: str, app_dir: str) -> list[Path]:
    """Where the app's source lives: its package's directory, or its module's directory."""
    module = app.partition(":")[0]
    directory = os.path.abspath(app_dir)
    sys.path.insert(0, directory)
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        spec = None
    finally:
        sys.path.remove(directory)
    if spec is None or spec.origin is None:
        raise ConfigError(f"--app {app!r}: no module {module!r} (looked in {directory} first)")
    locations = spec.submodule_search_locations
    return [Path(p) for p in locations] if locations else [Path(spec.origin).parent]


def worker(plan: DevPlan, env: dict[str, str]) -> Child:
    args = [*EMQ_WORKER, "run", "--app", plan.app, "--app-dir", plan.app_dir]
    for queue in plan.queues:
        args += ["--queue", queue]
    return Child("worker", args, env)


def dashboard(bind: str, env: dict[str, str]) -> Child:
    # Warnings only: uvicorn's access log would bury the worker's lines.
    args = [*EMQ_WORKER, "dashboard", "--bind", bind, "--log-level", "warning"]
    return Child("dashboard", args, env)


def wait_http(url: str, child: Child, timeout_s: float = DASHBOARD_START_S) -> bool:
    """Poll until `url` answers (any HTTP status), the child exits, or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.exited() is None:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(POLL_S / 4)
    return False


@contextlib.contextmanager
def data_directory(persist: Path | None) -> Iterator[Path]:
    """`--persist DIR` as given (kept); else a temporary directory removed on exit."""
    if persist is not None:
        persist.mkdir(parents=True, exist_ok=True)
        yield persist
        return
    directory = Path(tempfile.mkdtemp(prefix="emq-dev-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM (the previous handlers come back on exit)."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def child_env(server: LocalServer) -> dict[str, str]:
    return {**os.environ, "EMQ_REDIS_URL": server.url}


def start_dashboard(env: dict[str, str], echo: Echo) -> Child | None:
    bind = f"127.0.0.1:{free_port()}"
    child = dashboard(bind, env)
    child.start()
    if wait_http(f"http://{bind}/", child):
        echo(f"  dashboard:  http://{bind}/")
        return child
    echo(f"  dashboard:  did not start on {bind} (exit code {child.exited()}); going on without it")
    child.stop()
    return None


def serve(plan: DevPlan, server_binary: str, echo: Echo) -> int:
    """Run everything until SIGINT/SIGTERM (0), or until the worker exits without --reload (its
    code); stop it all on the way out."""
    with stop_on_signals() as stop, data_directory(plan.persist) as directory:
        persist = plan.persist is not None
        server = LocalServer(server_binary, directory, port=plan.port, persist=persist)
        children: list[Child] = []
        try:
            server.start()
            env = child_env(server)
            announce(plan, server, directory, echo)
            run = worker(plan, env)
            run.start()
            children.append(run)
            board = start_dashboard(env, echo) if plan.dashboard else None
            children += [board] if board is not None else []
            echo("Ctrl-C stops everything.")
            return watch(plan, run, stop, echo) if plan.watch else wait(run, stop, echo)
        finally:
            for child in children:
                child.stop()
            server.stop()
            echo(f"emq-worker dev: stopped{'' if persist else '; data directory removed'}")


def announce(plan: DevPlan, server: LocalServer, directory: Path, echo: Echo) -> None:
    kept = "kept" if plan.persist is not None else "removed on exit"
    embedded = " (embedded)" if is_embedded(server.binary) else ""
    echo(f"emq-worker dev: {server.version()}{embedded} on {server.url}")
    echo(f"  data:       {directory} ({kept})")
    echo(f"  export EMQ_REDIS_URL={server.url}")
    echo(f"  worker:     {plan.app} on {', '.join(plan.queues)}")


def wait(run: Child, stop: threading.Event, echo: Echo) -> int:
    while not stop.wait(POLL_S):
        code = run.exited()
        if code is not None:
            echo(f"emq-worker dev: the worker exited (code {code}); stopping")
            return code
    return 0


def watch(plan: DevPlan, run: Child, stop: threading.Event, echo: Echo) -> int:
    """Restart the worker on each change to a .py file of the app; a worker that exits (an
    import error in the edit) starts again on the next change."""
    import watchfiles

    reported = watching = False
    for changes in watchfiles.watch(
        *plan.watch,
        watch_filter=watchfiles.PythonFilter(),
        debounce=400,
        stop_event=stop,
        rust_timeout=WATCH_TIMEOUT_MS,
        yield_on_timeout=True,
        raise_interrupt=False,
    ):
        if not watching:  # the watcher is live from its first yield on
            echo(f"  reload:     watching {', '.join(map(str, plan.watch))} (*.py)")
            watching = True
        if changes:
            names = ", ".join(sorted({Path(path).name for _, path in changes}))
            echo(f"emq-worker dev: {names} changed: restarting the worker")
            run.restart()
            reported = False
        elif not reported and (code := run.exited()) is not None:
            echo(f"emq-worker dev: the worker exited (code {code}); it restarts on a change")
            reported = True
    return 0
