"""What the demo saw: worker log events (in-process and from subprocesses' JSON lines) and
the lease deadlines the server held, polled from `active`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from redis.asyncio import Redis

from emq_worker.cli.demo.timing import POLL_S, STORY_TIMEOUT_S
from emq_worker.protocol.keys import QueueKeys


@dataclass(slots=True)
class Event:
    at: float
    """time.monotonic() when it was seen."""
    worker: str
    name: str
    facts: dict[str, Any]


@dataclass(slots=True)
class Recorder:
    """Every log event of the story's workers, in arrival order."""

    events: list[Event] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, worker: str, name: str, facts: dict[str, Any]) -> None:
        self.events.append(Event(time.monotonic(), worker, name, facts))
        self.changed.set()

    def find(self, name: str, worker: str | None = None) -> list[Event]:
        return [e for e in self.events if e.name == name and worker in (None, e.worker)]

    async def until(self, done: Callable[[], bool], within_s: float = STORY_TIMEOUT_S) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while not done():
                    self.changed.clear()
                    await self.changed.wait()
        return done()


RECORDER = Recorder()


def _capture(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    facts = dict(event_dict)
    RECORDER.add(str(facts.pop("worker", "?")), str(facts.pop("event", "")), facts)
    raise structlog.DropEvent


def capture_in_process_logs() -> None:
    """Route this process's worker logs into RECORDER instead of the terminal."""
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, _capture],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )


@dataclass(slots=True)
class LeaseWatch:
    """The job's lease as the server holds it, polled: per attempt the first deadline, then
    every change of it (renewals), and the moment it passed while still held (a lapse)."""

    t0: float
    server_t0_ms: int
    claims: dict[int, float] = field(default_factory=dict)
    """attempt -> first deadline (ms from story start)."""
    renewals: list[tuple[float, int, float]] = field(default_factory=list)
    """(seen at, attempt, new deadline)."""
    lapses: list[tuple[int, float]] = field(default_factory=list)
    """(attempt, deadline that passed while the job still sat in active with it)."""

    async def run(self, client: Redis, keys: QueueKeys, job_id: str) -> None:
        last: tuple[int, float] | None = None
        while True:
            async with client.pipeline(transaction=False) as pipe:
                pipe.time()
                pipe.zscore(keys.active, job_id)
                pipe.hget(keys.job(job_id), "attempts")
                now_pair, score, attempts = await pipe.execute()
            now_ms = int(now_pair[0]) * 1000 + int(now_pair[1]) / 1000 - self.server_t0_ms
            current = None
            if score is not None and attempts is not None:
                current = (int(attempts), float(score) - self.server_t0_ms)
            if (
                last is not None
                and now_ms >= last[1]
                and last not in self.lapses
                and (current is None or current == last or current[0] != last[0])
            ):
                self.lapses.append(last)  # past its deadline and not renewed
            if current is not None and current != last:
                attempt, deadline = current
                if attempt not in self.claims:
                    self.claims[attempt] = deadline
                else:
                    self.renewals.append((self.rel(time.monotonic()), attempt, deadline))
            last = current
            await asyncio.sleep(POLL_S)

    def rel(self, at: float) -> float:
        return (at - self.t0) * 1000
