"""What README and docs/how-to/tests.md say of each tier's size is what the suite holds: each
"about N tests" within 15 % of the tests collected for that tier (tests/support/tiers.py), and
each duration named with the CI run that measured it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import tiers

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 0.15
SAID = {
    "README.md": {
        "default": r"the default tier: about ([\d ]+) deterministic tests",
        "fault": r"the fault tier\s+\(about ([\d ]+?)\s+tests",
        "soak": r"at CI size\s+\(about ([\d ]+?)\s+tests",
    },
    "docs/how-to/tests.md": {
        "default": r"^\| default \|.*\| about ([\d ]+) tests",
        "fault": r"^\| fault \|.*\| about ([\d ]+) tests",
        "soak": r"^\| soak \|.*\| about ([\d ]+) tests",
    },
}
CI_RUN = re.compile(r"(?:CI|run) at (?:commit )?\b[0-9a-f]{7}\b")


def said(page: str, tier: str) -> int:
    found = re.search(SAID[page][tier], (REPO / page).read_text(), re.MULTILINE)
    assert found, f"{page} no longer says how many tests the {tier} tier holds"
    return int(found.group(1).replace(" ", ""))


@pytest.mark.parametrize("page", sorted(SAID))
def test_each_tier_holds_about_as_many_tests_as_the_docs_say(
    page: str, request: pytest.FixtureRequest
) -> None:
    counts = tiers.collected(request.config)
    for tier in tiers.TIERS:
        stated, actual = said(page, tier), counts[tier]
        assert abs(stated - actual) <= TOLERANCE * actual, (
            f"{page} says about {stated} tests in the {tier} tier; it holds {actual}"
        )


@pytest.mark.parametrize("page", sorted(SAID))
def test_the_tiers_durations_name_the_ci_run_that_measured_them(page: str) -> None:
    text = (REPO / page).read_text()
    assert CI_RUN.search(text), f"{page} states the tiers' durations without naming a CI run"
    assert not re.search(r"about \d+ minutes", text), f"{page}: a duration with no run named"
