"""A resource one test leaves unclosed fails that test, not whichever later test the collector
happens to run in (tests/support/leaks.py): checked on a small session of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LEAKING_SESSION = '''
import gc
import warnings


class Handle:
    """Warns when freed open, as an unclosed connection does."""

    def __init__(self) -> None:
        self.myself = self  # a reference cycle: only the collector frees it

    def __del__(self) -> None:
        warnings.warn("unclosed Handle", ResourceWarning)


def test_leaks_a_handle() -> None:
    Handle()


def test_collects_after_it() -> None:
    gc.collect()
'''


def test_an_unclosed_resource_fails_the_test_that_left_it(tmp_path: Path, repo_root: Path) -> None:
    (tmp_path / "test_leaking.py").write_text(LEAKING_SESSION)
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.leaks",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:asyncio",
            "-ra",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = done.stdout + done.stderr
    assert "ERROR test_leaking.py::test_leaks_a_handle" in said, said
    assert "unclosed Handle" in said, said
    assert "test_collects_after_it" not in said, said  # the later test is not blamed
    assert "2 passed, 1 error" in said, said  # the leaker's call passed; its teardown failed
