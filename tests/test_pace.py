"""The drain's claim size, and whether it claims ahead of a free slot, follow the pace of handlers
against claims (runtime/pace.py)."""

from __future__ import annotations

from emq_worker.runtime.pace import AHEAD_SHARE, Pace


def test_claims_are_whole_until_anything_is_known() -> None:
    assert not Pace().split_claims()


def test_handlers_that_await_io_split_the_claims() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.001)  # a claim: 1 ms from sent to reply
        pace.handled(0.004, 0.0)  # a handler awaiting a store: 4 ms
    assert pace.split_claims()


def test_handlers_that_await_nothing_keep_whole_claims() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.001)
        pace.handled(0.00001, 0.0)  # a no-op: 10 us
    assert not pace.split_claims()


def test_the_averages_follow_a_change_of_work() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.001)
        pace.handled(0.004, 0.0)
    for _ in range(100):
        pace.handled(0.00001, 0.0)
    assert not pace.split_claims()


def test_nothing_is_claimed_ahead_until_a_handler_ended_and_a_claim_was_timed() -> None:
    pace = Pace()
    assert not pace.claims_ahead(0.0)
    pace.claimed(0.002)
    assert not pace.claims_ahead(0.0)  # no handler has ended: their length is unknown
    pace.handled(0.00001, 0.0)
    assert pace.claims_ahead(0.0)


def test_short_handlers_claim_ahead_long_ones_do_not() -> None:
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.002)
        pace.handled(0.003, 10.0)  # a handler awaiting a store: under AHEAD_SHARE claims
    assert pace.claims_ahead(10.0)
    for _ in range(100):
        pace.handled(0.5, 10.0)  # half a second: the claim is nothing beside it
    assert not pace.claims_ahead(10.0)


def test_claims_ahead_stop_once_no_handler_ends_for_a_while() -> None:
    """Short handlers so far, but the ones running now have not ended for many claims' time:
    they are long, whatever the average says, and a job claimed ahead would wait for them."""
    pace = Pace()
    for _ in range(100):
        pace.claimed(0.002)
        pace.handled(0.00001, 10.0)
    assert pace.claims_ahead(10.001)
    assert not pace.claims_ahead(10.0 + 0.002 * AHEAD_SHARE)
