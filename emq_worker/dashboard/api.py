"""The JSON endpoints: what the pages show, for scripts and for the browser's graphs."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emq_worker.dashboard import fleet, history_reads, pages, queues, tabs
from emq_worker.dashboard.params import (
    choice_param,
    open_queue,
    optional_queue_param,
    page_param,
)
from emq_worker.dashboard.runtime import dashboard

HISTORY_QUEUES = 200
"""Queues summed by the overview's graph at most (the first, by name)."""


async def queues_json(request: Request) -> Response:
    return JSONResponse((await pages.overview(request)).as_dict())


async def history_json(request: Request) -> Response:
    """?range=1h|6h|24h|7d|14d, and ?queue=q (else every queue found, summed)."""
    client = dashboard(request).redis
    chosen = choice_param(request, "range", tuple(history_reads.RANGES))
    only = optional_queue_param(request)
    names = [only] if only else (await dashboard(request).queues.find()).queues[:HISTORY_QUEUES]
    found = await history_reads.series(client, names, chosen)
    return JSONResponse({"queues": names, "range": chosen, **found.as_dict()})


async def sparks_json(request: Request) -> Response:
    """The last hour per minute of the overview's page of queues (?page=)."""
    client = dashboard(request).redis
    found = await dashboard(request).queues.find()
    page = queues.Page(page_param(request), pages.QUEUES_PER_PAGE, len(found.queues))
    names = found.queues[page.start : page.stop + 1]
    return JSONResponse(await history_reads.sparks(client, names))


async def workers_json(request: Request) -> Response:
    client = dashboard(request).redis
    only = optional_queue_param(request)
    names = [only] if only else (await dashboard(request).queues.find()).queues
    return JSONResponse((await fleet.fleet(client, names)).as_dict())


async def tasks_json(request: Request) -> Response:
    rows, chosen, only = await pages.task_table(request)
    return JSONResponse({"range": chosen, "queue": only, "tasks": [r.as_dict() for r in rows]})


async def jobs_json(request: Request) -> Response:
    """?state=pending|scheduled|active|dead|completed|waiting|retries&page=N&order=oldest|newest"""
    queue = await open_queue(request)
    state = choice_param(request, "state", tabs.TABS)
    order = choice_param(request, "order", ("oldest", "newest"))
    found = await tabs.list_tab(
        request, queue, state, page_param(request), newest_first=order == "newest"
    )
    return JSONResponse(found.as_dict())
