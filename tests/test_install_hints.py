"""Every install hint works where the user is: emq-worker is installed from a checkout (it is on
no package index), so no hint may send anyone to `pip install 'emq-worker[...]'`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from emq_worker.cli.install import installed_from, pip_line

ROOT = Path(__file__).resolve().parent.parent
INDEX_HINT = re.compile(r"pip install ['\"]?emq-worker\[")


def shipped_text_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Dockerfile"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file())
    files += sorted((ROOT / "emq_worker").rglob("*.py"))
    return files


@pytest.mark.parametrize("path", shipped_text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hint_installs_from_a_package_index(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if path.name == "install.py":  # it explains why the hint is never given
        return
    assert not INDEX_HINT.search(text), f"{path}: {INDEX_HINT.search(text)}"


def test_the_hint_names_the_checkout_this_package_was_installed_from() -> None:
    source = installed_from()
    assert source is not None, "the test venv holds an editable install of a checkout"
    assert (Path(source) / "pyproject.toml").exists()
    assert pip_line("dashboard") == f"python -m pip install -e '{source}[dashboard]'"


def test_the_hint_for_a_checkout_path_runs_as_a_shell_line(tmp_path: Path) -> None:
    line = pip_line("dev", source=str(tmp_path / "my checkout"))
    echoed = subprocess.run(
        ["sh", "-c", line.replace("python -m pip install -e", "printf %s")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert echoed.stdout == f"{tmp_path / 'my checkout'}[dev]"
