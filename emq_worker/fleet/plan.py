"""What the parent starts: N children, each the parent's own `run` command line with a few
options appended (click takes the last value of an option given twice)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from emq_worker.errors import ConfigError
from emq_worker.observe.http import parse_host_port

CHILD_MODULE = "emq_worker.cli"
"""`python -m emq_worker.cli`: the `emq-worker` command, whatever the console script is called."""
DEFAULT_WATCHDOG_S = 30.0
"""How long a ready child may stay silent (no beat) before it is killed and replaced, when
systemd gives no watchdog interval of its own (WatchdogSec=)."""
PARENT_PID_VARIABLE = "EMQ_PARENT_PID"
PROCESS_INDEX_VARIABLE = "EMQ_PROCESS_INDEX"
"""Set in each child's environment: which process of which parent it is (for its log lines,
and so that it stops when its parent dies)."""
OWN_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
"""systemd's variables for the parent, replaced in each child's environment by the parent's own."""


@dataclass(frozen=True, slots=True)
class FleetPlan:
    processes: int
    args: tuple[str, ...]
    """The parent's command line after the program name: `run --queue orders ...`."""
    http: str | None = None
    """The parent's HOST:PORT; child i serves on HOST:PORT+1+i."""
    burst: bool = False
    """A child that exits 0 is done, not restarted (`--burst`)."""
    process_pool: int | None = None
    """Each child's `--process-pool`, when the parent decides it (cores shared among children)."""

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ConfigError(f"processes must be >= 1; got {self.processes}", setting="processes")
        if self.http is not None:
            self._check_ports(self.http)
        if not self.args or self.args[0] != "run":
            raise ConfigError(
                f"processes needs the parent's own `run` command line to start its children; "
                f"got {list(self.args)!r}",
                setting="processes",
            )

    def _check_ports(self, http: str) -> None:
        _, port = parse_host_port(http)
        if port == 0:
            raise ConfigError(
                f"http needs a fixed port with {self.processes} processes (the parent serves "
                f"PORT, process i PORT+1+i); got {http!r}",
                setting="http",
            )
        if port + self.processes > 65535:
            raise ConfigError(
                f"http port {port} + {self.processes} processes passes 65535; got {http!r}",
                setting="http",
            )

    def child_http(self, index: int) -> str | None:
        if self.http is None:
            return None
        host, port = parse_host_port(self.http)
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{port + 1 + index}"

    def command(self, index: int) -> list[str]:
        extra = ["--processes", "1"]
        child_http = self.child_http(index)
        if child_http is not None:
            extra += ["--http", child_http]
        if self.process_pool is not None:
            extra += ["--process-pool", str(self.process_pool)]
        return [sys.executable, "-m", CHILD_MODULE, *self.args, *extra]


def child_environ(
    environ: Mapping[str, str], notify_socket: str, watchdog_s: float, parent_pid: int, index: int
) -> dict[str, str]:
    """The child's environment: the parent's, with the parent as its service manager."""
    env = {name: value for name, value in environ.items() if name not in OWN_VARIABLES}
    env["NOTIFY_SOCKET"] = notify_socket
    env["WATCHDOG_USEC"] = str(int(watchdog_s * 1_000_000))
    env[PARENT_PID_VARIABLE] = str(parent_pid)
    env[PROCESS_INDEX_VARIABLE] = str(index)
    return env
