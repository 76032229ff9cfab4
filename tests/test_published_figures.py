"""README's headline figures are the latest published run's (docs/benchmarks/*-published.json,
written by `python -m bench --publish`), and the guarantees page's table the latest full chaos
run's (docs/benchmarks/*-guarantees.json, `python -m tests.chaos --publish`): a hand edit of a
table, or a new run whose table was not regenerated, fails here."""

from __future__ import annotations

import json

from bench import publish
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
    for system in ("emq", "arq", "saq"):
        for _, metric, _ in publish.HEADLINE:
            assert metric in published["median"][system], (system, metric)


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
