"""Renewal lines (runtime/renewal_lines.py): sends rotate over WARM_LINES connected lines, so a
re-send made while a renewal is stuck in a silent cut goes on a line that is already connected
(the kernel retransmits it as soon as packets flow) instead of a dial whose SYN the cut drops."""

from __future__ import annotations

import contextlib
from typing import cast

import anyio
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.renewal_lines import (
    CLOSE_WAIT_S,
    MOST_LINES,
    WARM_LINES,
    RenewalLine,
    RenewalLines,
)


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


class LineClient:
    """A line's client that records whether it holds connections: `discover` opens them once
    `go` is set (a cluster client reading the slot map), `aclose` closes them."""

    def __init__(self, close_fails: int = 0, close_hangs: bool = False) -> None:
        self.open = False
        self.closes = 0
        self._close_fails = close_fails
        self._close_hangs = close_hangs

    async def discover(self, go: anyio.Event) -> None:
        await go.wait()
        self.open = True

    async def aclose(self) -> None:
        self.closes += 1
        if self._close_hangs:
            await anyio.Event().wait()
        if self.closes <= self._close_fails:  # as redis-py's close after a stall of the loop
            raise RedisTimeoutError("Timed out closing connection after 0.1")
        self.open = False


def lines_of(
    clients: list[LineClient], *, most: int = MOST_LINES, close_wait_s: float = CLOSE_WAIT_S
) -> RenewalLines:
    handed = iter(clients)

    def dial() -> Redis:
        return cast(Redis, next(handed))

    return RenewalLines(dial, cast(Scripts, object()), most, most, close_wait_s)


async def test_a_send_in_flight_at_close_leaves_nothing_open_when_it_ends() -> None:
    client = LineClient()
    lines = lines_of([client], most=1)
    go = anyio.Event()

    async def send() -> None:
        with lines.idle() as line:
            assert line is not None
            await client.discover(go)  # opens its connections after the close began

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(send)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(lines.aclose)
            await anyio.wait_all_tasks_blocked()
            go.set()
    assert not client.open, "the send in flight opened connections after the lines closed"


async def test_a_stuck_send_does_not_hold_up_the_close() -> None:
    client = LineClient()
    lines = lines_of([client], most=1, close_wait_s=0.05)
    never = anyio.Event()

    async def send() -> None:
        with lines.idle() as line:
            assert line is not None
            await never.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            await lines.aclose()
        assert client.closes == 1, "the stuck send's line was not closed"
        group.cancel_scope.cancel()


async def connect_each(lines: RenewalLines, clients: list[LineClient]) -> None:
    """One send per client, each on its own line, ended: every line connected and idle."""
    go = anyio.Event()
    go.set()
    for client in clients:
        with lines.idle() as line:
            assert line is not None
            await client.discover(go)


async def test_a_close_that_fails_leaves_no_line_open() -> None:
    clients = [LineClient(close_fails=1), LineClient(), LineClient()]
    lines = lines_of(clients)
    await connect_each(lines, clients)
    await lines.aclose()
    assert [client.open for client in clients] == [False] * 3


async def test_a_close_that_hangs_does_not_hold_up_the_others_or_the_stop() -> None:
    clients = [LineClient(close_hangs=True), LineClient()]
    lines = lines_of(clients, close_wait_s=0.05)
    await connect_each(lines, clients)
    with anyio.fail_after(5):
        await lines.aclose()
    assert not clients[1].open


async def test_nothing_is_dialled_once_closed() -> None:
    dial = Dialler()
    lines = lines_with(dial)
    await lines.aclose()
    with lines.idle() as line:
        assert line is None
    assert dial.dialled == []
