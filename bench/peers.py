"""The systems under test: emq-worker (this venv) and the peers, each in a virtualenv of its own.

arq pins `redis<6` and SAQ `redis<8`, neither fits the project's own environment, so the bench
creates `bench/.venvs/<peer>` on first use (`python -m venv` + `pip install`, latest releases)
and records the versions it finds there. A venv is rebuilt only when its marker file is missing
or names other requirements (or with `--refresh-peers`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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

    @property
    def is_peer(self) -> bool:
        return bool(self.requirements)

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python" if self.is_peer else Path(sys.executable)


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
}


def ensure_venv(system: System, *, uvloop: bool, refresh: bool) -> float | None:
    """Create the peer's venv when needed (and add uvloop to it when asked for); return the
    seconds that took, None when everything was there already."""
    if not system.is_peer:
        return None
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


def _pip(system: System, requirements: list[str]) -> None:
    _run(
        [str(system.python), "-m", "pip", "install", "--quiet", *requirements],
        f"pip install {' '.join(requirements)} into {system.venv}",
    )


def versions(system: System) -> dict[str, str]:
    out = _run(
        [str(system.python), "-c", VERSIONS_SCRIPT, *system.packages, "uvloop"],
        f"reading versions in {system.python}",
    )
    found: dict[str, str] = json.loads(out)
    return found


def _run(args: list[str], what: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise BenchError(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout
