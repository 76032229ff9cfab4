"""The checker itself, on hand-made histories: each verdict fires on the history that defines it
and stays quiet on a clean one (so a green chaos row means something)."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import Fault, FinalState, JobRow, check, percentile
from tests.chaos.ledger import DONE, START, Event

GONE = JobRow(None, 0)


def run(job: str, attempt: int, pid: int, at: float, *, done: bool = True) -> list[Event]:
    events = [Event(START, job, attempt, pid, at, at)]
    if done:
        events.append(Event(DONE, job, attempt, pid, at + 0.1, at + 0.1))
    return events


def completed(job: str, attempts: int, *, repeated: bool = False) -> dict[str, Any]:
    return {"event": "job_completed", "job_id": job, "attempts": attempts, "repeated": repeated}


def final(
    rows: dict[str, JobRow], completed_count: int, dead: set[str] | None = None
) -> FinalState:
    return FinalState(rows, completed_count, dead or set(), active=0, locks=0)


def test_a_clean_history_with_a_rerun_after_a_kill_is_ok() -> None:
    events = [*run("a", 1, 10, 1.0, done=False), *run("a", 2, 11, 3.0), *run("b", 1, 11, 1.5)]
    logs = {11: [completed("a", 2), completed("b", 1)]}
    verdict = check(
        ["a", "b"], events, logs, final({"a": GONE, "b": GONE}, 2), [Fault("sigkill", 2.0, 10)]
    )
    assert verdict.ok
    assert verdict.extra_runs == 1
    assert verdict.recovery_s == [1.0]


def test_a_job_still_pending_or_gone_without_a_run_is_lost() -> None:
    verdict = check(["a", "b"], [], {}, final({"a": JobRow("pending", 0), "b": GONE}, 0))
    assert verdict.lost == ["a", "b"]
    assert verdict.lost_count == 2
    assert not verdict.ok


def test_rows_gone_beyond_the_completed_count_are_lost_even_after_a_run() -> None:
    events = [*run("a", 1, 10, 1.0), *run("b", 1, 10, 1.0)]
    verdict = check(["a", "b"], events, {}, final({"a": GONE, "b": GONE}, 1))
    assert verdict.lost_count == 1


def test_two_accepted_completions_are_a_duplicate_a_repeated_one_is_not() -> None:
    events = [*run("a", 1, 10, 1.0), *run("a", 2, 11, 2.0)]
    twice = {10: [completed("a", 2)], 11: [completed("a", 2)]}
    assert check(["a"], events, twice, final({"a": GONE}, 1)).duplicated == ["a"]
    resent = {10: [completed("a", 2), completed("a", 2, repeated=True)]}
    assert check(["a"], events, resent, final({"a": GONE}, 1)).duplicated == []
    assert check(["a"], events, {}, final({"a": GONE}, 2)).duplicated_count == 1


def test_a_completion_accepted_from_a_superseded_attempt_is_stale() -> None:
    events = [*run("a", 1, 10, 1.0), *run("a", 2, 11, 2.0)]
    verdict = check(["a"], events, {10: [completed("a", 1)]}, final({"a": GONE}, 1))
    assert verdict.stale == ["a"]
    assert not verdict.ok


def test_unknown_ids_double_claims_regressions_and_leftover_leases_are_flagged() -> None:
    events = [*run("a", 2, 10, 1.0), *run("a", 2, 11, 2.0), *run("x", 1, 10, 1.0)]
    state = FinalState({"a": GONE}, 1, set(), active=1, locks=1, extra_ids={"y"})
    verdict = check(["a"], events, {}, state)
    assert verdict.unexpected == ["x", "y"]
    assert verdict.double_claimed == ["a"]
    assert verdict.regressed == ["a"]
    assert verdict.stranded == 2


def test_a_must_complete_job_that_ended_dead_is_unexpected() -> None:
    events = run("a", 3, 10, 1.0, done=False)
    verdict = check(
        ["a"], events, {}, final({"a": JobRow("dead", 3)}, 0, {"a"}), must_complete=["a"]
    )
    assert verdict.unexpected == ["a"]
    assert verdict.lost == []


def test_percentile_is_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([], 0.99) is None
