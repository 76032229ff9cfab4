"""The testing kit (`emq_worker.testing`) as a user meets it: a small project of its own (the app
and the tests of tests/testing_kit/) run by pytest in a subprocess with the plugin enabled, on
the embedded Valkey the plugin starts, and type-checked by mypy --strict."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parent / "testing_kit"
USER_TESTS = 5


def user_project(tmp_path: Path) -> Path:
    project = tmp_path / "shop_project"
    project.mkdir()
    shutil.copy(KIT / "shop.py", project / "shop.py")
    shutil.copy(KIT / "user_tests.py", project / "test_shop.py")
    shutil.copy(KIT / "user_pytest.ini", project / "pytest.ini")
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
        ["pytest", "-p", "emq_worker.testing", "-p", "no:cacheprovider", "--durations=0", "-vv"],
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
