"""The chaos runner SIGTERMed in the middle of a partition row removes what the row made: its
network namespaces (named after the runner's pid), its server and its workers. Needs root and
`ip netns` (skipped otherwise, saying so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos import netns
from tests.support.processes import REPO_ROOT

REASON = netns.unavailable()
pytestmark = [pytest.mark.fault, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

APPEAR_WITHIN_S = 60.0
EXIT_WITHIN_S = 30.0


def namespaces_of(pid: int) -> list[str]:
    listed = netns._ip("netns", "list", check=False).stdout.splitlines()
    return [line.split(" ", 1)[0] for line in listed if line.startswith(f"{netns.PREFIX}-{pid}-")]


def processes_under(directory: str, runner: int) -> dict[int, str]:
    """Live processes other than `runner` working in `directory` (the server, in its --dir) or
    naming it in their environment (the workers' ledger path): the row's server and workers."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == runner:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                line = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/environ", "rb") as environ:
                named = directory.encode() in environ.read()
            named = named or os.readlink(f"/proc/{entry}/cwd").startswith(directory)
        except OSError:
            continue  # exited meanwhile
        if named:
            found[int(entry)] = line
    return found


def kill_left(directory: str, runner: int) -> None:
    """What a runner that died without unwinding left behind: its processes, its namespaces."""
    for pid in processes_under(directory, runner):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    netns.remove_orphans()


def wait_for(probe: Callable[[], object], what: str, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out after {within_s} s waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_a_sigterm_removes_the_rows_namespaces_server_and_workers(tmp_path: Path) -> None:
    keep = str(tmp_path / "rows")
    runner = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos", "--rows", "netns-tick", "--keep", keep],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # Once A's worker runs (it names the kept directory), the namespaces exist.
        wait_for(lambda: len(namespaces_of(runner.pid)) == 2, "the namespaces", APPEAR_WITHIN_S)
        wait_for(
            lambda: len(processes_under(keep, runner.pid)) >= 3,
            "A, B and the server",
            APPEAR_WITHIN_S,
        )
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=EXIT_WITHIN_S)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        left = namespaces_of(runner.pid), processes_under(keep, runner.pid)
        kill_left(keep, runner.pid)
    assert left == ([], {}), f"left behind: namespaces {left[0]}, processes {left[1]}"
    assert runner.returncode == 128 + signal.SIGTERM, stderr.decode()[-2000:]
