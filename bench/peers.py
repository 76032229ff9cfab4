"""The systems under test: emq-worker (this venv) and the peers, each in a directory of its own.

arq pins `redis<6` and SAQ `redis<8`, neither fits the project's own environment, so the bench
creates `bench/.venvs/<peer>` on first use (`python -m venv` + `pip install`, latest releases)
and records the versions it finds there. BullMQ on Node.js gets `bench/.venvs/bullmq_node`, made
by `npm install` (the `node` on PATH runs it). A directory is rebuilt only when its marker file
is missing or names other requirements (or with `--refresh-peers`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bench.procs import REPO, BenchError

VENVS = REPO / "bench" / ".venvs"
MARKER = "bench-requirements.txt"
VERSIONS_SCRIPT = (
    "import json, sys, importlib.metadata as m\n"
    "found = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try: found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError: pass\n"
    "print(json.dumps(found))\n"
)


@dataclass(frozen=True, slots=True)
class System:
    name: str
    """Short name used in --only and metric keys: emq, arq, saq."""
    label: str
    module: str
    requirements: tuple[str, ...]
    """What pip installs into the peer's venv; empty for emq-worker (the project's venv)."""
    packages: tuple[str, ...]
    """Whose versions the results record."""
    runtime: Literal["python", "node"] = "python"
    """Node peers run `node <module> <their node_modules' parent> '<cfg>'`: `module` is the
    runner script's path in the repository."""

    @property
    def is_peer(self) -> bool:
        return bool(self.requirements)

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python" if self.is_peer else Path(sys.executable)

    def command(self) -> list[str]:
        """The runner's command line, without its JSON config."""
        if self.runtime == "node":
            return [node_binary(), str(REPO / self.module), str(self.venv)]
        return [str(self.python), "-m", self.module]


SYSTEMS = {
    "emq": System(
        "emq",
        "emq-worker",
        "bench.runners.emq_runner",
        (),
        ("emq-worker", "redis", "hiredis", "anyio", "structlog"),
    ),
    "arq": System("arq", "arq", "bench.runners.arq_runner", ("arq",), ("arq", "redis", "hiredis")),
    "saq": System(
        "saq",
        "SAQ",
        "bench.runners.saq_runner",
        # saq 0.26 imports typing_extensions without declaring it.
        ("saq[redis,hiredis]", "typing_extensions"),
        ("saq", "redis", "hiredis"),
    ),
    "taskiq": System(
        "taskiq",
        "taskiq",
        "bench.runners.taskiq_runner",
        # redis: the realistic body's own client (taskiq-redis brings it too).
        ("taskiq", "taskiq-redis", "redis"),
        ("taskiq", "taskiq-redis", "redis"),
    ),
    "streaq": System(
        "streaq",
        "streaq",
        "bench.runners.streaq_runner",
        # streaq talks to Redis through coredis; redis-py is only the realistic body's client.
        ("streaq", "redis"),
        ("streaq", "coredis", "redis"),
    ),
    "bullmq_py": System(
        "bullmq_py",
        "BullMQ (Python)",
        "bench.runners.bullmq_py_runner",
        # BullMQ's Python port talks to Redis through redis-py's asyncio client, as the body does.
        ("bullmq", "redis"),
        ("bullmq", "redis", "msgpack"),
    ),
    "bullmq_node": System(
        "bullmq_node",
        "BullMQ (Node.js)",
        "bench/runners/bullmq_runner.cjs",
        # BullMQ 6 makes ioredis an optional peer dependency; the body uses the same client.
        ("bullmq", "ioredis"),
        ("bullmq", "ioredis"),
        runtime="node",
    ),
}


def node_binary() -> str:
    found = shutil.which("node")
    if found is None:
        raise BenchError("BullMQ (Node.js) needs `node` on PATH")
    return found


def ensure_venv(system: System, *, uvloop: bool, refresh: bool) -> float | None:
    """Create the peer's venv when needed (and add uvloop to it when asked for); return the
    seconds that took, None when everything was there already."""
    if not system.is_peer:
        return None
    if system.runtime == "node":
        return _ensure_node_modules(system, refresh=refresh)
    wanted = "\n".join(system.requirements) + "\n"
    marker = system.venv / MARKER
    begun = time.monotonic()
    built = False
    if refresh or not marker.exists() or marker.read_text() != wanted:
        if system.venv.exists():
            shutil.rmtree(system.venv)
        _run([sys.executable, "-m", "venv", str(system.venv)], f"creating {system.venv}")
        _pip(system, list(system.requirements))
        marker.write_text(wanted)
        built = True
    if uvloop and "uvloop" not in versions(system):
        _pip(system, ["uvloop"])
        built = True
    return time.monotonic() - begun if built else None


def _ensure_node_modules(system: System, *, refresh: bool) -> float | None:
    """`npm install` the peer's packages (latest releases) into its own directory."""
    wanted = "\n".join(system.requirements) + "\n"
    marker = system.venv / MARKER
    if not refresh and marker.exists() and marker.read_text() == wanted:
        return None
    begun = time.monotonic()
    if system.venv.exists():
        shutil.rmtree(system.venv)
    system.venv.mkdir(parents=True)
    npm = shutil.which("npm")
    if npm is None:
        raise BenchError("BullMQ (Node.js) needs `npm` on PATH to install bullmq")
    args = [npm, "install", "--prefix", str(system.venv), "--no-audit", "--no-fund"]
    _run([*args, *system.requirements], f"npm install {' '.join(system.requirements)}")
    marker.write_text(wanted)
    return time.monotonic() - begun


def _pip(system: System, requirements: list[str]) -> None:
    _run(
        [str(system.python), "-m", "pip", "install", "--quiet", *requirements],
        f"pip install {' '.join(requirements)} into {system.venv}",
    )


def versions(system: System) -> dict[str, str]:
    if system.runtime == "node":
        return _node_versions(system)
    out = _run(
        [str(system.python), "-c", VERSIONS_SCRIPT, *system.packages, "uvloop"],
        f"reading versions in {system.python}",
    )
    found: dict[str, str] = json.loads(out)
    return found


def _node_versions(system: System) -> dict[str, str]:
    found = {"node": _run([node_binary(), "--version"], "node --version").strip().lstrip("v")}
    for name in system.packages:
        manifest = system.venv / "node_modules" / name / "package.json"
        if manifest.exists():
            found[name] = json.loads(manifest.read_text())["version"]
    return found


def _run(args: list[str], what: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise BenchError(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout
