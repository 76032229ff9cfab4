"""README's headline figures are the latest published run's (docs/benchmarks/*-published.json,
written by `python -m bench --publish`), and the guarantees page's table the latest full chaos
run's (docs/benchmarks/*-guarantees.json, `python -m tests.chaos --publish`): a hand edit of a
table, or a new run whose table was not regenerated, fails here."""

from __future__ import annotations

import json
import re

from bench import performance_page, publish
from bench.peers import SYSTEMS
from bench.plan import PUBLISH, PUBLISHED_SCENARIOS
from tests.chaos import publish as chaos_publish


def test_readmes_headline_table_is_generated_from_the_latest_published_json() -> None:
    published = json.loads(publish.latest().read_text())
    shown = publish.block_of(publish.README.read_text())
    assert shown == publish.headline(published), (
        f"README.md's headline table differs from {publish.latest().name}: run "
        f"`python -m bench --publish --from {publish.latest().relative_to(publish.REPO)}`"
    )


def test_the_published_json_says_where_its_figures_come_from() -> None:
    published = json.loads(publish.latest().read_text())
    assert {"commit", "date", "machine", "versions", "median", "idle"} <= set(published)
    assert published["commit"] in publish.block_of(publish.README.read_text())
    median = published["median"]
    for _, metric, _ in publish.HEADLINE:
        # A row the run did not measure at all (added to the table after it) is left out of the
        # table; one it measured for some systems and not others is a failed measurement.
        measured = [system for system in median if metric in median[system]]
        assert measured in ([], list(median)), (metric, measured)
    assert {"emq", "arq", "saq"} <= set(median)


def test_the_headline_shows_every_system_and_both_realistic_bodies() -> None:
    median = {name: {metric: 1000.0 for _, metric, _ in publish.HEADLINE} for name in SYSTEMS}
    published = {
        "commit": "abc1234",
        "date": "2026-12-03T06:00:00+00:00",
        "machine": {"nproc": 2, "server": "Redis 7.0.15"},
        "versions": {name: {SYSTEMS[name].packages[0]: "1.2.3"} for name in SYSTEMS},
        "repeat": 3,
        "median": median,
        "idle": {"commands_s": 66.0},
    }
    lines = publish.headline(published).splitlines()
    header = next(line for line in lines if line.startswith("| |"))
    assert [cell.strip() for cell in header.strip("|").split("|")][1:] == [
        "emq-worker",
        "BullMQ (Node.js)",
        "BullMQ (Python)",
        "taskiq",
        "SAQ",
        "streaq",
        "arq",
    ]
    assert "BullMQ (Node.js) 1.2.3" in lines[0]
    assert "arq 1.2.3" in lines[0]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| |")]
    labels = [row.split(" | ")[0] for row in rows]
    assert any("own client" in label for label in labels)
    assert any("`ctx.redis`" in label for label in labels)
    for row in rows:
        if "jobs/s" in row:  # a figure in every system's column
            assert [cell.strip() for cell in row.strip("|").split("|")][1:] == ["1 000"] * 7, row


def test_performance_pages_tables_are_generated_from_the_latest_published_json() -> None:
    source = publish.latest()
    published = json.loads(source.read_text())
    page = performance_page.PAGE.read_text()
    for (begin, end), block in performance_page.blocks(published, source.name).items():
        assert publish.block_of(page, begin, end) == block, (
            f"performance.md's {begin} block differs from {source.name}: run "
            f"`python -m bench --publish --from {source.relative_to(publish.REPO)}`"
        )


COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7}\b")


def tables_after_their_prose(text: str) -> list[tuple[str, str]]:
    """Each Markdown table of `text`, with the prose of its section up to it."""
    found: list[tuple[str, str]] = []
    section: list[str] = []
    table: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            found.append(("\n".join(section), "\n".join(table)))
            table = []
        section = [line] if line.startswith("#") else [*section, line]
    return found


def test_every_other_table_of_the_performance_page_names_its_commit_and_command() -> None:
    """A table the publish run does not generate says, in its section's prose before it, at
    which commit and by which `python -m ...` command it was measured."""
    page = performance_page.PAGE.read_text()
    for begin, end in (performance_page.SOURCE, performance_page.REALISTIC, performance_page.IDLE):
        page = publish.rewritten(page, "", begin, end)
    tables = tables_after_their_prose(page)
    assert len(tables) >= 6
    for prose, table in tables:
        assert COMMIT.search(prose), f"no commit named before the table {table[:120]!r}"
        assert "python -m " in prose, f"no command named before the table {table[:120]!r}"


def test_publish_measures_every_headline_metric_for_every_system() -> None:
    """The publish plan's scenarios record every metric the table shows (for a system that has
    no handler client, its realistic body's own client stands in)."""
    recorded = {f"drain.noop.c{c}.jobs_s" for c in PUBLISH.noop_concurrencies} | {
        f"drain.sleep1ms.c{c}.jobs_s" for c in PUBLISH.sleep_concurrencies
    }
    recorded |= {f"drain.noop.c{c}.round_trips" for c in PUBLISH.noop_concurrencies}
    c = PUBLISH.realistic_concurrency
    recorded |= {f"drain.{task}.c{c}.jobs_s" for task in PUBLISH.realistic_tasks}
    recorded |= {"latency.idle.p50_ms"}
    assert {"drain", "sleep", "realistic", "latency"} <= set(PUBLISHED_SCENARIOS)
    assert {metric for _, metric, _ in publish.HEADLINE} <= recorded


def test_a_table_cell_is_written_as_the_readme_writes_it() -> None:
    assert publish.written(37900.27, "count") == "37 900"
    assert [publish.written(v, "ms") for v in (0.8075, 1.3, 261.99)] == [
        "0.81 ms",
        "1.30 ms",
        "262 ms",
    ]
    assert [publish.written(v, "ratio") for v in (0.0204, 6.002)] == ["0.02", "6.0"]


def test_the_guarantees_table_is_generated_from_the_latest_chaos_json() -> None:
    source = chaos_publish.latest()
    published = json.loads(source.read_text())
    shown = chaos_publish.block_of(chaos_publish.PAGE.read_text())
    assert shown == chaos_publish.block(published), (
        f"guarantees.md's table differs from {source.name}: run "
        f"`python -m tests.chaos --publish --from {source.relative_to(chaos_publish.REPO)}`"
    )
    assert {"commit", "date", "server", "records"} <= set(published)
    assert all(
        record["lost"] == 0 or "no persistence" in record["row"] for record in published["records"]
    )
