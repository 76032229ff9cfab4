"""Renewal lines (runtime/renewal_lines.py): sends rotate over WARM_LINES connected lines, so a
re-send made while a renewal is stuck in a silent cut goes on a line that is already connected
(the kernel retransmits it as soon as packets flow) instead of a dial whose SYN the cut drops."""

from __future__ import annotations

import contextlib
from typing import cast

from redis.asyncio import Redis

from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.renewal_lines import MOST_LINES, WARM_LINES, RenewalLine, RenewalLines


class Dialler:
    def __init__(self) -> None:
        self.dialled: list[Redis] = []

    def __call__(self) -> Redis:
        client = cast(Redis, object())  # never used: the lines are only handed out
        self.dialled.append(client)
        return client


def lines_with(dial: Dialler, most: int = MOST_LINES) -> RenewalLines:
    return RenewalLines(dial, cast(Scripts, object()), most=most)


def take_one(lines: RenewalLines) -> RenewalLine:
    with lines.idle() as line:
        assert line is not None
        return line


def test_ticks_rotate_over_the_warm_lines_at_no_extra_dial() -> None:
    dial = Dialler()
    lines = lines_with(dial)
    taken = [take_one(lines).client for _ in range(3 * WARM_LINES)]
    assert len(dial.dialled) == WARM_LINES
    # Each line carries every WARM_LINES-th tick: all stay connected.
    assert taken == dial.dialled * 3


def test_a_resend_beside_a_stuck_renewal_goes_on_a_connected_line() -> None:
    dial = Dialler()
    lines = lines_with(dial)
    for _ in range(WARM_LINES):  # the ticks before the cut
        take_one(lines)
    with lines.idle() as stuck:  # the tick sent into the cut, unanswered
        assert stuck is not None
        resends = []
        for _ in range(WARM_LINES - 1):
            with lines.idle() as line:
                assert line is not None
                resends.append(line.client)
        assert len(dial.dialled) == WARM_LINES, "a re-send dialled while a connected line idled"
        assert stuck.client not in resends
        assert set(resends) | {stuck.client} == set(dial.dialled)


def test_all_lines_busy_dials_up_to_most_then_none() -> None:
    dial = Dialler()
    most = WARM_LINES + 2
    lines = lines_with(dial, most=most)
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(lines.idle()) for _ in range(most)]
        assert all(line is not None for line in held)
        assert len({id(line) for line in held}) == most
        assert stack.enter_context(lines.idle()) is None
    assert len(lines) == most
