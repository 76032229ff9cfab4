"""The drain's claim size follows the pace of handlers against claims (runtime/pace.py)."""

from __future__ import annotations

from emq_worker.runtime.pace import Pace


def test_claims_are_whole_until_anything_is_known() -> None:
    assert not Pace().split_claims()


def test_handlers_that_await_io_split_the_claims() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.001)  # a claim: 1 ms from sent to reply
        pace.handled(0.004)  # a handler awaiting a store: 4 ms
    assert pace.split_claims()


def test_handlers_that_await_nothing_keep_whole_claims() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.001)
        pace.handled(0.00001)  # a no-op: 10 us
    assert not pace.split_claims()


def test_the_averages_follow_a_change_of_work() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.001)
        pace.handled(0.004)
    for _ in range(100):
        pace.handled(0.00001)
    assert not pace.split_claims()
