"""How many tests each tier of the suite holds, for the docs that say so (tests/test_tier_sizes.py).

tests/conftest.py records the count from every session's collection, before `-m` deselects
anything; a session that collected only part of the suite (one file, one test) gets it from a
`--collect-only` of the whole suite in a subprocess, where this module is loaded as a plugin
(`-p tests.support.tiers`) and prints it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

TIERS = ("default", "fault", "soak")
COUNTS = pytest.StashKey[dict[str, int]]()
"""The whole suite's count per tier, set when the session collected the whole suite."""
PRINTED = "tier counts: "


def tier_of(item: pytest.Item) -> str:
    for tier in ("fault", "soak"):
        if item.get_closest_marker(tier) is not None:
            return tier
    return "default"


def count(items: Sequence[pytest.Item]) -> dict[str, int]:
    found = Counter(tier_of(item) for item in items)
    return {tier: found[tier] for tier in TIERS}


def whole_suite(config: pytest.Config) -> bool:
    """Whether the session collects every test: no path narrower than tests/, no test id."""
    tests = (config.rootpath / "tests").resolve()
    args = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    wide = all(arg in (tests, config.rootpath.resolve()) for arg in args)
    return wide and not any("::" in arg for arg in config.args)


def record(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    if whole_suite(config):
        config.stash[COUNTS] = count(items)


def collected(config: pytest.Config) -> dict[str, int]:
    """This session's count if it collected the whole suite, else a subprocess's."""
    if COUNTS in config.stash:
        return config.stash[COUNTS]
    plugins = ["-p", "no:cacheprovider", "-p", "tests.support.tiers"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "", *plugins, "tests"],
        cwd=config.rootpath,
        capture_output=True,
        text=True,
        check=False,
    )
    said = [line for line in done.stdout.splitlines() if line.startswith(PRINTED)]
    assert said, f"no counts from the collection (exit {done.returncode}): {done.stdout[-2000:]}"
    counts: dict[str, int] = json.loads(said[-1].removeprefix(PRINTED))
    return counts


def pytest_collection_finish(session: pytest.Session) -> None:
    """As a plugin (`-p tests.support.tiers`, with `-m ""`): print the whole suite's count."""
    print(PRINTED + json.dumps(count(session.items)))
