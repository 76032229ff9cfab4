"""The agenda's bookkeeping (runtime/agenda.py), without Redis: when each queue is checked, claimed,
promoted and scanned for repeats, and that no time already past can end a park at once."""

from __future__ import annotations

import random

import pytest

from emq_worker.protocol.upkeep_check import UpkeepDue
from emq_worker.runtime.agenda import Agenda, check_window_s, quiet_budget_s


def agenda(
    *names: str, window_s: float = 1.0, beat_s: float = 1.0, budget_s: float = 0.0
) -> Agenda:
    return Agenda(names or ("q",), window_s, beat_s, random.Random(7), budget_s)


@pytest.mark.parametrize(
    ("queues", "beat_s", "lease_s", "window_s"),
    [
        (1, 1.0, 30.0, 10.0),
        (100, 1.0, 30.0, 10.0),
        (150, 0.5, 60.0, 7.5),
        (1, 0.1, 0.6, 0.2),
        (1_000, 1.0, 30.0, 10.0),
    ],
)
def test_the_check_window_is_ten_beats_longer_with_many_queues_and_under_a_third_of_the_lease(
    queues: int, beat_s: float, lease_s: float, window_s: float
) -> None:
    assert check_window_s(queues, beat_s, lease_s) == pytest.approx(window_s)


def test_the_check_window_stays_under_a_third_of_the_lease() -> None:
    """A lease taken just after a check is seen by the next one before it can lapse."""
    assert check_window_s(100, 1.0, 3.0) == 1.0


def test_every_queue_is_checked_and_claimed_first() -> None:
    plan = agenda("a", "b")
    assert [plan[name].check_at for name in plan] == [0.0, 0.0]
    assert plan.wants_claim("a", 0.0)
    assert plan.wants_claim("b", 0.0)


def test_a_quiet_check_is_made_again_one_window_later() -> None:
    plan = agenda()
    plan.checked("q", UpkeepDue(), now=10.0, window_s=0.95)
    assert plan["q"].check_at == pytest.approx(11.0)  # the next tick (a tenth of the window)
    assert (plan["q"].promote_at, plan["q"].repeat_at) == (None, None)


def test_a_check_held_by_another_worker_is_made_a_beat_after_that_one_lapses() -> None:
    """Its maker checks first (when it lapses); if the maker is gone, a beat later: a note made
    over a dead holder's lease lapses at its deadline, so the lease is reaped within a beat."""
    plan = agenda(window_s=10.0, beat_s=1.0)
    plan["q"].promote_at = 12.0  # known from this worker's own wake: kept
    plan.checked("q", UpkeepDue(held_ms=400), now=10.0, window_s=10.0)
    assert plan["q"].check_at == pytest.approx(11.4)
    assert plan["q"].promote_at == 12.0


def test_a_held_check_that_saw_no_lease_waits_as_long_as_a_new_lease_allows() -> None:
    """The maker of the note checks every window; the fleet's other workers only stand in for it
    if it is gone: a lease taken after their look is still seen before its deadline by a check
    `quiet_budget_s` later, even made late by an idle park. So each pays a `held` answer about
    every 20 s at the defaults, not every window, and its park ends for none."""
    budget_s = quiet_budget_s(lease_s=30.0, beat_s=1.0, idle_park_s=8.5)
    assert budget_s == pytest.approx(17.5)
    plan = agenda(window_s=10.0, beat_s=1.0, budget_s=budget_s)
    plan.checked("q", UpkeepDue(held_ms=9_000, leased=False), now=10.0, window_s=10.0)
    assert plan["q"].check_at == pytest.approx(27.5)
    assert plan["q"].check_waits
    assert plan.next_time(10.0) is None  # the park does not end for it
    plan.checked("q", UpkeepDue(held_ms=9_000, leased=True), now=10.0, window_s=10.0)
    assert plan["q"].check_at == pytest.approx(20.0)  # a beat after the note lapses, as before
    assert not plan["q"].check_waits
    assert plan.next_time(10.0) == pytest.approx(20.0)


def test_checks_end_the_park_on_time_when_the_lease_leaves_no_room() -> None:
    """A short lease (a fault test's 5 s with a 200 ms beat) has no budget: every check is made
    when due, as before."""
    assert quiet_budget_s(lease_s=5.0, beat_s=0.2, idle_park_s=7.7) <= 0
    plan = agenda(window_s=1.6, beat_s=0.2, budget_s=0.0)
    plan.checked("q", UpkeepDue(held_ms=1_000, leased=False), now=10.0, window_s=1.6)
    assert plan["q"].check_at == pytest.approx(11.2)
    plan.checked("q", UpkeepDue(), now=10.0, window_s=1.6)
    assert not plan["q"].check_waits


def test_the_makers_own_check_ends_the_park_on_time() -> None:
    """The window is the longest a queue nothing wakes goes unlooked-at (a job an EchoMQ
    producer enqueued without a token waits that long at most): its maker's check keeps it."""
    plan = agenda(window_s=10.0, beat_s=1.0, budget_s=17.5)
    plan.checked("q", UpkeepDue(), now=10.0, window_s=10.0)
    assert not plan["q"].check_waits
    assert plan.next_time(10.0) == pytest.approx(20.0)


def test_a_lease_lapsing_soon_brings_the_next_check_forward() -> None:
    plan = agenda()
    plan.checked("q", UpkeepDue(reap_in=250), now=10.0, window_s=1.0)
    assert plan["q"].check_at == pytest.approx(10.25)


def test_what_a_check_finds_due_is_scheduled_and_pending_jobs_are_claimed() -> None:
    plan = agenda()
    plan.claimed("q", leased=0, dry=True, renew_at=None)
    assert not plan.wants_claim("q", 10.0)
    plan.checked("q", UpkeepDue(promote_in=0, repeat_in=3_000, pending=2), now=10.0, window_s=1.0)
    assert plan["q"].promote_at == 10.0
    assert plan["q"].repeat_at == pytest.approx(13.0)
    assert plan.scheduled()
    assert plan.wants_claim("q", 10.0)


def test_a_dry_claim_ends_the_want_and_its_offer_is_kept_when_due_without_a_claim() -> None:
    plan = agenda(window_s=10.0)
    plan.claimed("q", leased=3, dry=True, renew_at=19.5)
    assert not plan.offer_due("q", 18.9)
    assert plan.offer_due("q", 19.0)  # the tick before its time
    assert not plan.wants_claim("q", 19.5)
    assert plan.next_time(10.0) == 19.0
    plan.offer_kept("q", renew_at=29.0)
    assert (plan["q"].offer_at, plan.wants_claim("q", 29.0)) == (29.0, False)


def test_an_offer_gone_when_kept_has_its_queue_claimed() -> None:
    plan = agenda()
    plan.claimed("q", leased=0, dry=True, renew_at=19.5)
    plan.offer_kept("q", renew_at=None)
    assert plan.wants_claim("q", 19.5)
    assert plan["q"].offer_at is None


def test_an_offer_is_not_kept_apart_while_a_claim_is_due_anyway() -> None:
    plan = agenda()
    plan.claimed("q", leased=0, dry=True, renew_at=19.5)
    plan.woken("q")
    assert not plan.offer_due("q", 20.0)


def test_a_full_claim_keeps_the_queue_wanted() -> None:
    plan = agenda()
    plan.claimed("q", leased=10, dry=False, renew_at=None)
    assert plan.wants_claim("q", 0.0)


def test_a_limit_holds_the_queue_back_until_its_window_reopens() -> None:
    plan = agenda()
    plan.held_back("q", until=10.5)
    assert plan.holding()
    assert not plan.wants_claim("q", 10.4)
    assert plan.wants_claim("q", 10.5)


def test_a_wake_that_found_nothing_to_claim_is_reported_once() -> None:
    """It announced a due time: the supervisor promotes and scans repeats on that queue."""
    plan = agenda("a", "b")
    plan.woken("a")
    plan.woken("b")
    plan.claimed("a", leased=0, dry=True, renew_at=None)
    plan.claimed("b", leased=1, dry=True, renew_at=None)
    assert plan.woken_dry() == ["a"]
    assert plan.woken_dry() == []
    assert not plan["a"].woken


def test_jobs_a_reap_returned_are_claimed_and_a_full_batch_is_reaped_again_next() -> None:
    plan = agenda()
    plan.claimed("q", leased=0, dry=True, renew_at=None)
    plan.checked("q", UpkeepDue(), now=10.0, window_s=1.0)
    plan.reaped("q", returned=2, more=False, now=10.0)
    assert plan["q"].check_at == pytest.approx(11.0)
    assert plan.wants_claim("q", 10.0)
    plan.reaped("q", returned=100, more=True, now=10.0)
    assert plan["q"].check_at == 10.0


def test_a_queue_with_leases_is_checked_every_beat_whatever_the_window() -> None:
    """As the reaper always ran: a stalled server's lapsed leases are reaped by a check queued
    during the stall, before their holders' renewals."""
    plan = agenda(window_s=10.0, beat_s=1.0)
    plan.checked("q", UpkeepDue(), now=10.0, window_s=10.0, busy=True)
    assert plan["q"].check_at == pytest.approx(11.0)
    plan.checked("q", UpkeepDue(reap_in=20_000), now=20.0, window_s=10.0)
    assert plan["q"].check_at == pytest.approx(21.0)
    plan.checked("q", UpkeepDue(held_ms=5_000), now=30.0, window_s=10.0, busy=True)
    assert plan["q"].check_at == pytest.approx(31.0)


def test_the_next_time_ignores_times_already_past() -> None:
    """A past time is being handled, or waits on a resting queue or a free slot: ending the park
    for it at once would spin."""
    plan = agenda("a", "b")
    plan.checked("a", UpkeepDue(), now=10.0, window_s=1.0)
    plan.checked("b", UpkeepDue(promote_in=500), now=10.0, window_s=1.0)
    assert plan.next_time(10.0) == pytest.approx(10.5)
    assert plan.next_time(10.6) == pytest.approx(11.0)
    assert plan.next_time(11.5) is None


def test_burst_mode_checks_and_claims_every_queue_each_pass() -> None:
    plan = agenda("a", "b")
    for name in plan:
        plan.checked(name, UpkeepDue(), now=10.0, window_s=1.0)
        plan.claimed(name, leased=0, dry=True, renew_at=None)
    plan.eager(10.2)
    assert all(plan[name].check_at == 10.2 and plan.wants_claim(name, 10.2) for name in plan)


def test_quiet_checks_and_offer_renewals_fall_on_the_beat_s_grid() -> None:
    """So an idle worker's chores fall due together: one park for all, not one per queue. A
    quiet check waits for the next tick (never before its note lapses); a renewal takes the
    tick before (never after the offer lapses)."""
    plan = agenda("a", "b", window_s=10.0, beat_s=1.0)
    plan.checked("a", UpkeepDue(), now=10.2, window_s=9.3)
    plan.checked("b", UpkeepDue(), now=10.6, window_s=9.2)
    assert plan["a"].check_at == plan["b"].check_at == pytest.approx(20.0)
    plan.claimed("a", leased=0, dry=True, renew_at=19.7)
    assert plan["a"].offer_at == pytest.approx(19.0)


def test_a_check_for_a_lapsing_lease_is_not_moved_to_the_grid() -> None:
    plan = agenda(window_s=10.0, beat_s=1.0)
    plan.checked("q", UpkeepDue(reap_in=250), now=10.0, window_s=10.0)
    assert plan["q"].check_at == pytest.approx(10.25)
