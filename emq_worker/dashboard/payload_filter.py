"""A queue tab's payload filter (Sidekiq's): the jobs of one state whose payload contains a piece
of text, its ASCII letters compared without their case. Bounded, in one read-only script call
(lua/payload_filter.lua): it looks at the first FILTER_SCAN jobs of the tab in its order, reads no
payload larger than FILTER_PEEK_BYTES, and the page says how many it looked at of how many, how
many it skipped as too large, and how many matched."""

from __future__ import annotations

from dataclasses import dataclass

from emq_worker.dashboard import listing
from emq_worker.dashboard.queues import Page
from emq_worker.errors import ConfigError
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import server_ms

FILTER_SCAN = 2_000
"""The jobs a filter looks at, from the head of the tab in its order."""
FILTER_PEEK_BYTES = 65_536
"""A larger payload is not read to filter it (it is counted as skipped)."""
FILTER_MAX_CHARS = 200
SETS = {"pending": 1, "scheduled": 2, "active": 3}
"""The tabs the filter works on (their jobs' payloads are in their rows), and each one's key in
the script's KEYS."""
FILTERABLE = tuple(SETS)
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
"""What Lua's string.lower does to the payload (ASCII letters only)."""


@dataclass(frozen=True, slots=True)
class Filtered:
    text: str
    scanned: int
    """Jobs looked at (at most FILTER_SCAN)."""
    total: int
    """Jobs in the tab."""
    too_large: int
    """Jobs looked at whose payload was not read (over FILTER_PEEK_BYTES)."""
    matched: int
    listing: listing.Listing
    """The first matches (a page of them) as the tab lists its jobs."""


def filter_text(raw: str) -> str:
    if len(raw) > FILTER_MAX_CHARS:
        raise ConfigError(f"a filter is at most {FILTER_MAX_CHARS} characters; got {len(raw)}")
    return raw.strip()


async def filter_jobs(
    queue: Queue, state: str, wanted: str, *, newest_first: bool = False
) -> Filtered:
    """The jobs of `state` among the first FILTER_SCAN whose payload contains `wanted`."""
    if state not in SETS:
        raise ConfigError(f"the payload filter works on {', '.join(SETS)}; not {state!r}")
    args: list[str | int] = [
        queue.keys.prefix,
        SETS[state],
        wanted.translate(ASCII_LOWER),
        FILTER_SCAN,
        1 if newest_first else 0,
        FILTER_PEEK_BYTES,
        listing.PER_PAGE,
    ]
    total, scanned, too_large, matched, *kept = await queue.run("payload_filter", args)
    pairs = zip(kept[::2], kept[1::2], strict=True)
    scored = [(text(job_id), int(float(score))) for job_id, score in pairs]
    now_ms = await server_ms(queue.client, queue.keys.pending)
    rows = await listing.peek(queue.client, queue.keys, state, scored)
    page = Page(1, listing.PER_PAGE, len(rows))
    found = listing.Listing(queue.name, state, page, rows, now_ms, newest_first)
    return Filtered(wanted, int(scanned), int(total), int(too_large), int(matched), found)
