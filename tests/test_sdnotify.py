"""systemd's notify protocol against a socket the test binds, as systemd would for Type=notify:
READY=1 once serving, STATUS= lines with what is held, WATCHDOG=1 from the beat, STOPPING=1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from emq_worker import App, JobContext, Producer
from emq_worker.observe.sdnotify import Notifier, socket_address, watchdog_interval_s
from tests.support.processes import EMQ_WORKER, KILL_WAIT_S, REPO_ROOT
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

READY = "READY=1"
WATCHDOG = "WATCHDOG=1"
STOPPING = "STOPPING=1"


class NotifyListener:
    """A datagram unix socket bound like systemd's notify socket; collects what arrives.

    `value` is what NOTIFY_SOCKET would hold: a path, or `@name` for the abstract namespace."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.messages: list[list[str]] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + value[1:] if value.startswith("@") else value)
        self.sock.setblocking(False)

    def collect(self) -> list[list[str]]:
        """Every datagram received so far, each split into its lines."""
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return self.messages
            self.messages.append(data.decode().split("\n"))

    def lines(self) -> list[str]:
        return [line for message in self.collect() for line in message]

    def count(self, line: str) -> int:
        return self.lines().count(line)

    async def wait_for(self, line: str, *, times: int = 1, within_s: float = 10.0) -> None:
        async def probe() -> bool:
            return self.count(line) >= times

        await eventually(probe, timeout=within_s, what=f"{times} x {line!r}; got {self.lines()}")

    async def wait_for_status(self, text: str, *, within_s: float = 10.0) -> None:
        async def probe() -> bool:
            return f"STATUS={text}" in self.lines()

        await eventually(probe, timeout=within_s, what=f"STATUS={text}; got {self.lines()}")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> NotifyListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_socket_address_reads_paths_and_the_abstract_namespace() -> None:
    assert socket_address("/run/systemd/notify") == b"/run/systemd/notify"
    assert socket_address("@emq/notify") == b"\0emq/notify"
    assert socket_address("vsock:2:1234") is None
    assert socket_address("@") is None


def test_the_watchdog_is_on_only_for_the_process_systemd_named() -> None:
    pid = 4242
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}, pid) == 30.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "4242"}, pid) == 0.5
    assert watchdog_interval_s({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"}, pid) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}, pid) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}, pid) is None
    assert watchdog_interval_s({}, pid) is None


def test_without_notify_socket_every_call_is_a_no_op() -> None:
    with capture_logs() as logs, Notifier.from_environ({"WATCHDOG_USEC": "1000000"}) as notifier:
        notifier.ready("serving")
        notifier.status("held 0 of 10")
        notifier.watchdog()
        notifier.stopping()
    assert not notifier.enabled
    assert logs == []


def test_an_unsupported_socket_address_is_logged_and_ignored() -> None:
    with capture_logs() as logs, Notifier.from_environ({"NOTIFY_SOCKET": "vsock:2:1"}) as notifier:
        notifier.ready()
    assert not notifier.enabled
    assert [event["event"] for event in logs] == ["sd_notify_unsupported_socket"]


def test_a_send_that_fails_never_raises_and_is_logged_once(tmp_path: Path) -> None:
    absent = str(tmp_path / "no-systemd-here.sock")
    with capture_logs() as logs, Notifier.from_environ({"NOTIFY_SOCKET": absent}) as notifier:
        notifier.ready("serving")
        notifier.status("held 1 of 10")
        notifier.stopping()
    failures = [event for event in logs if event["event"] == "sd_notify_failed"]
    assert len(failures) == 1
    assert failures[0]["notify_socket"] == absent


def test_messages_are_datagrams_of_lines_and_stopping_is_sent_once(tmp_path: Path) -> None:
    with (
        NotifyListener(str(tmp_path / "notify.sock")) as systemd,
        Notifier.from_environ({"NOTIFY_SOCKET": systemd.value}) as notifier,
    ):
        notifier.ready("serving orders")
        notifier.status("held 2 of 10 on orders;\nsecond line")
        notifier.stopping("stopping")
        notifier.stopping("stopping again")
        assert systemd.collect() == [
            [READY, "STATUS=serving orders"],
            ["STATUS=held 2 of 10 on orders; second line"],
            [STOPPING, "STATUS=stopping"],
        ]


def test_watchdog_pings_are_paced_to_a_quarter_of_the_interval(tmp_path: Path) -> None:
    clock = StepClock()
    with (
        NotifyListener(str(tmp_path / "notify.sock")) as systemd,
        Notifier(os.fsencode(systemd.value), watchdog_s=1.0, clock=clock) as notifier,
    ):
        for now in [0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 1.0]:
            clock.now = now
            notifier.watchdog()
        assert systemd.count(WATCHDOG) == 4  # at 0.0, 0.25, 0.5 and 1.0


async def test_a_worker_reports_ready_what_it_holds_a_live_beat_and_stopping(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    app = App()
    started, release = anyio.Event(), anyio.Event()

    @app.task
    async def hold(ctx: JobContext) -> None:
        started.set()
        await release.wait()

    environ = {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())}
    with NotifyListener(str(tmp_path / "notify.sock")) as systemd:
        environ["NOTIFY_SOCKET"] = systemd.value
        with Notifier.from_environ(environ) as notifier:
            settings = worker_settings(queue_name, redis_url, beat_ms=100)
            async with running_worker(settings, app, notifier=notifier):
                await systemd.wait_for(READY)
                assert systemd.messages[0] == [READY, f"STATUS=serving {queue_name}"]
                await systemd.wait_for(WATCHDOG, times=3)

                await Producer(client).enqueue(queue_name, "hold", {})
                with anyio.fail_after(10):
                    await started.wait()
                await systemd.wait_for_status(f"held 1 of 10 on {queue_name}; 0 completed")
                release.set()
                await systemd.wait_for_status(f"held 0 of 10 on {queue_name}; 1 completed")
                assert systemd.count(STOPPING) == 0
            await systemd.wait_for(STOPPING)
            assert systemd.count(READY) == 1
            assert systemd.count(STOPPING) == 1


async def test_the_abstract_namespace_socket_gets_ready_and_stopping(
    redis_url: str, queue_name: str
) -> None:
    name = f"@emq-worker-test/{os.getpid()}/{uuid.uuid4().hex}"
    with (
        NotifyListener(name) as systemd,
        Notifier.from_environ({"NOTIFY_SOCKET": name}) as notifier,
    ):
        async with running_worker(worker_settings(queue_name, redis_url), App(), notifier=notifier):
            await systemd.wait_for(READY)
        await systemd.wait_for(STOPPING)
        assert systemd.count(WATCHDOG) == 0  # no WATCHDOG_USEC: systemd expects no pings


def start_daemon(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            args, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )


@pytest.mark.fault
async def test_emq_worker_run_under_notify_socket_is_ready_beats_and_stops(
    redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMQ_", "WATCHDOG_"))}
    args = [str(EMQ_WORKER), "run", "--queue", queue_name]
    args += ["--app", "emq_worker.examples.orders:app", "--redis-url", redis_url]
    args += ["--beat-ms", "100", "--log-format", "json"]
    log_path = tmp_path / "worker.log"
    with NotifyListener(str(tmp_path / "notify.sock")) as systemd:
        env.update(NOTIFY_SOCKET=systemd.value, WATCHDOG_USEC="400000")
        daemon = start_daemon(args, env, log_path)
        try:
            await systemd.wait_for(READY, within_s=20)
            await systemd.wait_for(WATCHDOG, times=2)
            daemon.send_signal(signal.SIGTERM)
            await systemd.wait_for(STOPPING)

            async def exited() -> bool:
                return daemon.poll() is not None

            await eventually(exited, timeout=20, what="emq-worker to exit after SIGTERM")
        finally:
            if daemon.poll() is None:
                daemon.kill()
            daemon.wait(timeout=KILL_WAIT_S)
        assert daemon.returncode == 0, log_path.read_text(encoding="utf-8")
        assert systemd.count(READY) == 1
