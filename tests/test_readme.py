"""The README as a new user reads it, top to bottom: what EchoMQ is, the worker before the suite,
where each command runs, and a map that reaches every how-to."""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SUITE_LINE = (
    "python3 -m venv .venv && . .venv/bin/activate && python -m pip install -e '.[test]' "
    "&& python -m pytest"
)


def test_the_readme_says_what_echomq_is_in_one_sentence() -> None:
    assert re.search(r"^EchoMQ is [^.]+\.", README, re.M), "no sentence starting 'EchoMQ is'"


def test_the_readme_opens_with_the_demo_and_the_tests_and_the_worker_before_the_suites_tiers() -> (
    None
):
    assert README.count(SUITE_LINE) == 1, "CI greps this exact line"
    first_block = README[README.index("```sh") : README.index("```", README.index("```sh") + 5)]
    assert "emq-worker demo" in first_block
    assert SUITE_LINE in first_block  # the two commands a fresh machine runs first
    assert README.index("## A worker in 30 lines") < README.index("## The tests")


def test_the_enqueue_lines_say_they_need_a_second_shell_with_the_venv() -> None:
    before_export = README[: README.index("export EMQ_REDIS_URL=")]
    tail = before_export[before_export.index("emq-worker dev --app") :]
    assert "second shell" in tail
    assert ". .venv/bin/activate" in tail


def test_the_readme_map_reaches_every_how_to() -> None:
    linked = set(re.findall(r"\(docs/(how-to/[\w-]+\.md)\)", README))
    pages = {f"how-to/{p.name}" for p in (ROOT / "docs" / "how-to").glob("*.md")}
    assert pages - linked == set()


def test_no_two_nav_entries_share_a_name() -> None:
    nav = YAML(typ="safe").load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    titles: list[str] = []

    def walk(entries: list[object]) -> None:
        for entry in entries:
            if isinstance(entry, dict):
                for title, target in entry.items():
                    titles.append(str(title))
                    if isinstance(target, list):
                        walk(target)

    walk(nav)
    assert len(titles) == len(set(titles)), titles
    leading = [t for t in titles if t.startswith("Test your tasks")]
    assert len(leading) <= 1, leading
