"""The import-layer contract in pyproject.toml ([tool.importlinter]) holds, and would catch a
violation: a copy of the package with one upward import (the wire reaching into the beat) and one
click import outside cli/ breaks both contracts, naming each offending import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "emq_worker"

# Runs lint-imports on the package found first on sys.path: the editable install's finder is
# dropped so a copy placed on the path is the one analysed.
LINT = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, sys.argv[1])
from importlinter.cli import lint_imports
sys.exit(lint_imports(config_filename=sys.argv[2], no_cache=True))
"""


def lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LINT, str(package_parent), str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=package_parent,
        timeout=60,
        check=False,
    )


def test_the_package_keeps_its_layers_and_only_the_cli_imports_click() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_an_upward_import_and_click_outside_the_cli_break_the_contracts(tmp_path: Path) -> None:
    copy = tmp_path / "emq_worker"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "protocol" / "keys.py").open("a") as keys:
        keys.write("\nfrom emq_worker.runtime import supervisor as _upward\n")
    with (copy / "observe" / "log.py").open("a") as log:
        log.write("\nimport click as _click\n")
    with (copy / "runtime" / "worker.py").open("a") as worker:  # the runtime is below fleet
        worker.write("\nfrom emq_worker.fleet import plan as _fleet\n")
    with (copy / "jobs" / "codec.py").open("a") as codec:  # nothing may import the testing kit
        codec.write("\nfrom emq_worker.testing import outcomes as _kit\n")
    result = lint(tmp_path)
    assert result.returncode == 1
    assert "Contracts: 0 kept, 2 broken." in result.stdout
    assert "emq_worker.protocol.keys -> emq_worker.runtime.supervisor" in result.stdout
    assert "emq_worker.observe.log -> click" in result.stdout
    assert "emq_worker.jobs.codec -> emq_worker.testing.outcomes" in result.stdout
    assert "emq_worker.runtime.worker -> emq_worker.fleet.plan" in result.stdout


def test_every_top_level_folder_is_described_in_the_architecture_page() -> None:
    folders = {
        entry.name
        for entry in PACKAGE.iterdir()
        if entry.is_dir() and not entry.name.startswith("__")
    }
    described = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    assert "runtime" in folders  # the scan reads the real package
    assert {name for name in folders if f"{name}/" not in described} == set()
