"""One page of a queue's tab, whichever it is: the states' sets (listing.py), pending with the
jobs in lanes, the flow parents waiting for children, and the retries."""

from __future__ import annotations

from starlette.requests import Request

from emq_worker.dashboard import lane_jobs, listing, retries, waiting
from emq_worker.dashboard.runtime import dashboard
from emq_worker.protocol.queue import Queue

TABS = (*listing.STATES, "waiting", "retries")
"""What `/api/queues/<q>/jobs?state=` takes: the states, and the two tabs filtered from them."""


async def list_tab(
    request: Request, queue: Queue, tab: str, number: int, *, newest_first: bool
) -> listing.Listing:
    if tab == "pending":
        return await lane_jobs.pending_with_lanes(queue, number, newest_first=newest_first)
    if tab == "waiting":
        finder = dashboard(request).parents
        return await waiting.list_waiting(
            queue.client,
            finder,
            queue.name,
            number,
            newest_first=newest_first,
            scan=request.query_params.get("scan") == "1",
        )
    if tab == "retries":
        return await retries.list_retries(
            queue.client, queue.name, number, newest_first=newest_first
        )
    return await listing.list_jobs(queue.client, queue.name, tab, number, newest_first=newest_first)
