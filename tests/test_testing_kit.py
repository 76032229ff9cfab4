"""The testing kit (`emq_worker.testing`) as a user meets it: a small project of its own (the app
and the tests of tests/testing_kit/) run by pytest in a subprocess with the plugin enabled, on
the embedded Valkey the plugin starts, and type-checked by mypy --strict."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

KIT = Path(__file__).resolve().parent / "testing_kit"
HOW_TO = KIT.parent.parent / "docs" / "how-to" / "testing.md"
USER_TESTS = 5


def how_to_pytest_ini() -> str:
    """The `pytest.ini` the how-to tells a user to write (its one ini block)."""
    blocks = re.findall(r"^```ini\n(.*?)^```$", HOW_TO.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, blocks
    return str(blocks[0])


def user_project(tmp_path: Path) -> Path:
    project = tmp_path / "shop_project"
    project.mkdir()
    shutil.copy(KIT / "shop.py", project / "shop.py")
    shutil.copy(KIT / "user_tests.py", project / "test_shop.py")
    # As the how-to shows it, and strict as this project's own configuration.
    (project / "pytest.ini").write_text(how_to_pytest_ini() + "filterwarnings = error\n")
    return project


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMQ_", "PYTEST_"))}
    # mypy does not follow the editable install's import hook: show it the checkout.
    env["MYPYPATH"] = str(KIT.parent.parent)
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_users_tests_run_with_the_plugin_on_the_embedded_server(tmp_path: Path) -> None:
    project = user_project(tmp_path)
    done = run(
        ["pytest", "-p", "no:cacheprovider", "--durations=0", "-vv"],
        project,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{USER_TESTS} passed" in done.stdout
    calls = re.findall(r"^(\d+\.\d+)s call\s+test_shop.py::(\w+)", done.stdout, re.M)
    assert len(calls) == USER_TESTS, done.stdout[-4000:]
    # The figures for the record (`pytest -s` shows them); no bound is asserted on them.
    print("\n".join(f"{seconds} s  {name}" for seconds, name in calls))


def test_a_users_tests_type_check_against_the_kit(tmp_path: Path) -> None:
    project = user_project(tmp_path)
    done = run(["mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "."], project)
    assert done.returncode == 0, done.stdout


def test_the_testing_extra_brings_what_the_how_to_needs() -> None:
    """`pip install '.[testing]'` alone must run the how-to's async tests: pytest-asyncio too."""
    extras = tomllib.loads((KIT.parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[<>=\[ ]", spec)[0] for spec in extras["testing"]}
    assert {"pytest", "pytest-asyncio"} <= names, extras["testing"]
    assert "asyncio_mode = auto" in how_to_pytest_ini()


def test_the_helpers_import_without_pytest() -> None:
    """The how-to's "Without pytest" script imports emq_worker.testing where pytest is absent."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"  # as if not installed
        "from emq_worker.testing import Emq, expect_completed, outcome, run_until_idle\n"
        "import emq_worker.testing as kit; assert not hasattr(kit, 'emq_url')\n"
        "from emq_worker.testing import *\n"
    )
    imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert imported.returncode == 0, imported.stderr
