"""A silent network partition made of Linux network namespaces, for one worker at a time.

Two namespaces are created per `Partition`, both with a unique name: the server's (`<tag>-s`)
and the cut-off worker's (`<tag>-a`), joined by a veth pair whose both ends live inside them, so
nothing of the host's own network is touched. The server runs inside its namespace and listens
on the veth address and on a unix socket; the worker to cut off runs inside the other namespace
and reaches the server only over the veth. Everyone else (the other worker, the test's probe)
uses the unix socket, which no network cut reaches.

The cut is `ip link set <server's veth end> down`: the worker's end loses its carrier and keeps
its routes, so every packet it sends (a renewal, a settle, a SYN of a new connection) is
dropped without a reset or an error, as a dead switch or a cloud network blip does. The heal is
`up`. Namespaces (and with them the veth) are deleted on exit, even on failure.

Needs root and `ip netns`; `unavailable()` says why not, for a skip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.chaos.ledger import LEDGER_ENV
from tests.support.lifecycle import Started, stop_process
from tests.support.processes import EMQ_WORKER, REPO_ROOT, WorkerProcess, WorkerProcesses
from tests.support.server import REDIS_SERVER, pid_alive

PREFIX = "emqcut"
SERVER_ADDRESS = "10.77.0.1"
WORKER_ADDRESS = "10.77.0.2"
SERVER_MAC = "02:00:0a:4d:00:01"
WORKER_MAC = "02:00:0a:4d:00:02"
SERVER_PORT = 16379
"""Any port: the server's namespace is new, so nothing else listens in it."""
START_DEADLINE_S = 10.0
IP_TIMEOUT_S = 10.0
_serial = itertools.count()


def unavailable() -> str | None:
    """Why namespaces cannot be made here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the partition rows as root)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


@dataclass(frozen=True, slots=True)
class Partition:
    """The two namespaces and the veth between them; `cut` and `heal` act on the link."""

    server_ns: str
    worker_ns: str
    server_link: str = "emq-s"
    worker_link: str = "emq-a"

    def cut(self) -> None:
        _ip("-n", self.server_ns, "link", "set", self.server_link, "down")

    def heal(self) -> None:
        _ip("-n", self.server_ns, "link", "set", self.server_link, "up")

    def cut_for(self, seconds: float, log: Path) -> TimedCut:
        """Take the link down for `seconds` in a helper process of its own, on the real-time
        scheduler (`chrt -f`, else `nice -n -10`): a loaded test process may wake late from its
        own sleep and heal late, and even a niced helper's `ip` and `sleep` ran 1 s for a
        0.6 s cut at load 16, longer than the scenario it stood for. The helper writes the
        wall time before the cut, after it, before the heal and after the heal to `log`."""
        ns, link = self.server_ns, self.server_link
        script = (
            f"date +%s.%N; ip -n {ns} link set {link} down; date +%s.%N; echo down; "
            f"sleep {seconds:.3f}; date +%s.%N; ip -n {ns} link set {link} up; date +%s.%N"
        )
        with log.open("wb") as out:
            popen = subprocess.Popen([*_urgent(), "sh", "-c", script], stdout=out)
        return TimedCut(popen, log)

    def inside(self, namespace: str) -> list[str]:
        """The command prefix that runs a program inside `namespace` (it execs: same pid)."""
        return ["ip", "netns", "exec", namespace]


@dataclass(frozen=True, slots=True)
class TimedCut:
    """A cut under way in its helper process (`Partition.cut_for`)."""

    popen: subprocess.Popen[bytes]
    log: Path

    def _lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").split()

    def is_down(self) -> bool:
        return "down" in self._lines()

    def healed(self) -> bool:
        return self.popen.poll() is not None

    def span(self) -> tuple[float, float]:
        """(wall time just before the link went down, just after it came up), once healed:
        the longest the cut can have lasted."""
        times = self._times()
        return times[0], times[-1]

    def shortest(self) -> float:
        """Seconds from just after the link went down to just before it came up: the least
        the cut lasted (`span` gives the most)."""
        times = self._times()
        return times[2] - times[1]

    def _times(self) -> list[float]:
        if self.popen.wait(timeout=IP_TIMEOUT_S) != 0:
            raise RuntimeError(f"the timed cut failed: {self._lines()}")
        return [float(word) for word in self._lines() if word != "down"]


def _urgent() -> list[str]:
    """The command prefix that runs a helper ahead of a loaded machine's other processes."""
    if shutil.which("chrt") is not None and os.geteuid() == 0:
        return ["chrt", "-f", "10"]
    return ["nice", "-n", "-10"]


@contextmanager
def partition() -> Iterator[Partition]:
    """Two fresh namespaces joined by a veth pair, linked up; deleted on exit."""
    remove_orphans()
    tag = f"{PREFIX}-{os.getpid()}-{next(_serial)}"
    made = Partition(f"{tag}-s", f"{tag}-a")
    try:
        _ip("netns", "add", made.server_ns)
        _ip("netns", "add", made.worker_ns)
        _ip(*_link_pair(made))
        for namespace, link, address, peer, peer_mac in (
            (made.server_ns, made.server_link, SERVER_ADDRESS, WORKER_ADDRESS, WORKER_MAC),
            (made.worker_ns, made.worker_link, WORKER_ADDRESS, SERVER_ADDRESS, SERVER_MAC),
        ):
            _ip("-n", namespace, "addr", "add", f"{address}/30", "dev", link)
            _ip("-n", namespace, "link", "set", link, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            # A permanent neighbour entry outlives the carrier loss: without it the kernel
            # flushes the entry at the cut and holds new packets in the ARP queue, releasing
            # them at the heal, so nothing sent into the cut would be lost.
            neighbour = (peer, "lladdr", peer_mac, "dev", link, "nud", "permanent")
            _ip("-n", namespace, "neigh", "replace", *neighbour)
        yield made
    finally:
        for namespace in (made.worker_ns, made.server_ns):
            _ip("netns", "del", namespace, check=False)


def remove_orphans() -> None:
    """Delete namespaces this module made in a process that is gone (one killed before its
    `finally` ran): their names carry the maker's pid."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split(" ", 1)[0]
        parts = name.split("-")
        ours = len(parts) == 4 and parts[0] == PREFIX and parts[1].isdigit()
        if ours and not pid_alive(int(parts[1])):
            _ip("netns", "del", name, check=False)


def _link_pair(made: Partition) -> list[str]:
    """The pair is created with each end already in its namespace: no name in the host's."""
    return [
        "link",
        "add",
        *(made.worker_link, "address", WORKER_MAC, "netns", made.worker_ns),
        *("type", "veth", "peer", "name", made.server_link),
        *("address", SERVER_MAC, "netns", made.server_ns),
    ]


class NamespacedServer(Started):
    """The chosen server binary (EMQ_TEST_SERVER) inside the server's namespace, listening on
    the veth address (for the worker to cut off) and on a unix socket (for everyone else)."""

    def __init__(self, cut: Partition, directory: Path, *, appendonly: bool = True) -> None:
        self.cut = cut
        self.directory = directory
        self.appendonly = appendonly
        # A unix socket path must fit in 108 bytes: a short directory of its own.
        self.socket_dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-"))
        self.socket = self.socket_dir / "server.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def local_url(self) -> str:
        """The unix socket: no cut reaches it."""
        return f"unix://{self.socket}?db=0"

    @property
    def veth_url(self) -> str:
        """Over the veth: for the worker inside the cut-off namespace only."""
        return f"redis://{SERVER_ADDRESS}:{SERVER_PORT}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            *self.cut.inside(self.cut.server_ns),
            REDIS_SERVER,
            *("--port", str(SERVER_PORT), "--bind", SERVER_ADDRESS, "--protected-mode", "no"),
            *("--unixsocket", str(self.socket), "--unixsocketperm", "700"),
            *("--dir", str(self.directory), "--save", ""),
            *("--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always"),
            *("--logfile", str(self.directory / "server.log")),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ping()

    def _wait_ping(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        client = redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=0.5)
        try:
            while not self._pings(client):
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"{REDIS_SERVER} in {self.cut.server_ns} exited at start")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{REDIS_SERVER} in {self.cut.server_ns} did not answer")
                time.sleep(0.02)
        finally:
            client.close()

    @staticmethod
    def _pings(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.exceptions.RedisError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 10)
            self.process = None
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def spawn_inside(
    processes: WorkerProcesses, namespace_prefix: Sequence[str], name: str, args: Sequence[str]
) -> WorkerProcess:
    """`emq-worker run <args>` behind `namespace_prefix` (`ip netns exec` execs, so the pid is
    the worker's), logging to `<name>.log` and writing the shared ledger; `processes` kills it
    on exit like any worker it started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env[LEDGER_ENV] = str(processes.ledger.path)
    processes.directory.mkdir(parents=True, exist_ok=True)
    log_path = processes.directory / f"{name}.log"
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            [*namespace_prefix, str(EMQ_WORKER), "run", *args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    worker = WorkerProcess(name, popen, log_path)
    processes.started.append(worker)
    return worker
