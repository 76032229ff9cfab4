"""`emq-worker inspect` of flow jobs: a parent shows its children still out and those done; a
child shows its parent, where that parent is, and its failure policy."""

from __future__ import annotations

from emq_worker.jobs.producer import Producer
from tests.support.flows import half_done_flow
from tests.test_admin_cli import as_json, cli, on_queue


def test_inspect_shows_a_parents_children_and_a_childs_parent(
    redis_url: str, queue_name: str
) -> None:
    parent, a, b, c = on_queue(redis_url, queue_name, half_done_flow)
    shown = as_json(cli(redis_url, "inspect", parent, "--queue", queue_name, "--json"))
    assert shown["where"] == "awaiting_children"
    assert shown["flow"]["children_outstanding"] == 1
    assert shown["flow"]["children_completed"] == [a]
    assert shown["flow"]["children_ignored"] == {b: "gave up"}
    text = cli(redis_url, "inspect", parent, "--queue", queue_name).output
    assert "flow children  1 still out; 1 completed; 1 ignored" in text
    assert f"  ignored      {b}: gave up" in text

    kids = queue_name + ".kids"
    child = as_json(cli(redis_url, "inspect", c, "--queue", kids, "--json"))["flow"]
    assert (child["parent"], child["parent_queue"]) == (parent, queue_name)
    assert (child["parent_where"], child["parent_policy"]) == ("awaiting_children", "fp")
    text = cli(redis_url, "inspect", c, "--queue", kids).output
    assert f"flow parent    {parent} in queue '{queue_name}' (awaiting_children)" in text

    plain = on_queue(redis_url, queue_name, lambda q: Producer(q.client).enqueue_raw(q.name, b"x"))
    assert (
        as_json(cli(redis_url, "inspect", plain.job_id, "-q", queue_name, "--json"))["flow"] is None
    )
