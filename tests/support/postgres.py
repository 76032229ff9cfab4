"""A throwaway PostgreSQL cluster for the tests of the fencing recipe, in a directory of its own.

Debian's binaries (`/usr/lib/postgresql/<version>/bin`, or `initdb` on PATH) make a cluster in a
fresh temporary directory; the server listens only on a Unix socket there (never on 5432 or any
TCP port, so it collides with nothing) and is stopped by its own PID. PostgreSQL refuses to run as
root, so under root both `initdb` and `postgres` run as the `postgres` user, which owns the
directory. `find_binaries` returns None when no PostgreSQL is installed: the tests then skip.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.support.lifecycle import Started, stop_process

START_DEADLINE_S = 20.0
STOP_DEADLINE_S = 10.0
POLL_S = 0.05
DATABASE = "postgres"
PORT = 5433
"""Only the socket's file name (`.s.PGSQL.5433`): the server listens on no TCP port."""


def find_binaries() -> Path | None:
    """The directory holding `initdb` and `postgres` (the newest Debian version), or None."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=_major, reverse=True)
    return versions[0].parent if versions else None


def _major(initdb: Path) -> int:
    name = initdb.parent.parent.name
    return int(name) if name.isdigit() else 0


def _run_as() -> str | None:
    """The user PostgreSQL must run as: `postgres` under root (it refuses root), else ourselves."""
    return "postgres" if os.geteuid() == 0 else None


class PostgresServer(Started):
    """One cluster: `start` runs initdb and the server, `conninfo` reaches it, `stop` ends it."""

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.user = _run_as()
        self.directory = Path(tempfile.mkdtemp(prefix="emq-pg-"))
        self.data = self.directory / "data"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def role(self) -> str:
        return self.user or pwd.getpwuid(os.geteuid()).pw_name

    @property
    def environment(self) -> dict[str, str]:
        """libpq's own variables: a process given these reaches the cluster with
        `psycopg.connect("")`, as the recipe's worker does."""
        return {
            "PGHOST": str(self.directory),
            "PGPORT": str(PORT),
            "PGUSER": self.role,
            "PGDATABASE": DATABASE,
        }

    @property
    def conninfo(self) -> str:
        return f"host={self.directory} port={PORT} user={self.role} dbname={DATABASE}"

    def start(self) -> None:
        if self.user is not None:
            shutil.chown(self.directory, self.user, self.user)
            self.directory.chmod(0o755)  # the test (root) reaches the socket; others may read it
        subprocess.run(
            [
                self.binaries / "initdb",
                "-D",
                self.data,
                "-A",
                "trust",
                "-U",
                self.role,
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            user=self.user,
        )
        log = (self.directory / "server.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binaries / "postgres",
                "-D",
                self.data,
                "-p",
                str(PORT),
                "-k",
                self.directory,
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
            ],
            stdout=log,
            stderr=log,
            user=self.user,
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited {self.process.returncode}: {self._log()}")
            try:
                psycopg.connect(self.conninfo, connect_timeout=2).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not answer: {exc}\n{self._log()}") from exc
            time.sleep(POLL_S)

    def _log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.directory / "server.log").read_text(errors="replace")[-2000:]
        return ""

    def stop(self) -> None:
        """A fast shutdown (SIGINT) of our own server, then SIGKILL if it lingers; the directory
        goes with it."""
        if self.process is not None:
            stop_process(self.process, STOP_DEADLINE_S, signal.SIGINT)
        shutil.rmtree(self.directory, ignore_errors=True)
