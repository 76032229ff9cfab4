"""The overview, a queue's job lists per state, the workers, the tasks and the search: HTML
pages and their live fragments (the JSON twins are in api.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from emq_worker.admin import verbs
from emq_worker.dashboard import (
    fleet,
    history_reads,
    job_search,
    layout,
    listing,
    payload_filter,
    queues,
    tabs,
)
from emq_worker.dashboard.params import (
    choice_param,
    open_queue,
    optional_queue_param,
    page_param,
)
from emq_worker.dashboard.runtime import dashboard, render
from emq_worker.protocol import ids
from emq_worker.protocol.keys import QueueKeys
from emq_worker.runtime.presence import presence_entries

QUEUES_PER_PAGE = 50
ERRORS_SHOWN = 3
DEFAULT_LEASE_MS = 30_000
"""The lease assumed for an active job whose worker announces none (EchoMQ's default)."""


@dataclass(frozen=True, slots=True)
class Overview:
    found: queues.Found
    page: queues.Page
    rows: list[verbs.QueueStats]
    workers: dict[str, int]
    """Live workers per queue on this page."""
    online: int
    """Distinct live workers on this page's queues."""

    @property
    def complete(self) -> bool:
        return self.found.complete

    def totals(self) -> dict[str, int]:
        names = ("pending", "active", "scheduled", "dead")
        return {name: sum(getattr(row.counts, name) for row in self.rows) for name in names}

    def as_dict(self) -> dict[str, Any]:
        return {
            "queues": [row.as_dict() for row in self.rows],
            "workers": self.workers,
            "complete": self.complete,
            "workers_online": self.online,
            **self.page.as_dict(),
        }


async def overview(request: Request) -> Overview:
    client = dashboard(request).redis
    found = await dashboard(request).queues.find()
    page = queues.Page(page_param(request), QUEUES_PER_PAGE, len(found.queues))
    names = found.queues[page.start : page.stop + 1]
    rows = await queues.queue_rows(client, names)
    crew = await fleet.fleet(client, names)
    per_queue = {name: sum(name in w.queues for w in crew.workers) for name in names}
    return Overview(found, page, rows, per_queue, len(crew.workers))


async def index(request: Request) -> Response:
    return render(request, "index.html", overview=await overview(request))


async def queues_fragment(request: Request) -> Response:
    return render(request, "_queues.html", overview=await overview(request))


async def state_page(request: Request) -> Response:
    """pending (with the jobs in lanes), scheduled, active, completed, waiting (flow parents)
    or retries: one page of the queue's jobs in that tab."""
    state = request.scope["route"].name
    queue = await open_queue(request)
    stats = await verbs.queue_stats(queue)
    order = choice_param(request, "order", ("oldest", "newest"))
    wanted = payload_filter.filter_text(request.query_params.get("filter", ""))
    filtered = None
    if wanted and state in payload_filter.FILTERABLE:
        filtered = await payload_filter.filter_jobs(
            queue, state, wanted, newest_first=order == "newest"
        )
        found = filtered.listing
    else:
        found = await tabs.list_tab(
            request, queue, state, page_param(request), newest_first=order == "newest"
        )
    bars = await _bars(queue.client, queue.name, found) if state == "active" else {}
    return render(
        request,
        "jobs.html",
        queue=queue.name,
        stats=stats,
        listing=found,
        tab=state,
        order=order,
        leases=bars,
        scanned=request.query_params.get("scan") == "1",
        filtered=filtered,
        filterable=state in payload_filter.FILTERABLE,
        scan_limit=payload_filter.FILTER_SCAN,
    )


async def _bars(client: Redis, queue: str, found: listing.Listing) -> dict[str, layout.Bar]:
    entries = await presence_entries(client, [queue])
    lease_ms = max((int(e.fields.get("lease_ms") or 0) for e in entries), default=0)
    held = fleet.holders(entries, found.now_ms)
    return layout.active_bars(found.rows, held, found.now_ms, lease_ms or DEFAULT_LEASE_MS)


async def workers_page(request: Request) -> Response:
    return render(request, "workers.html", fleet=await _fleet(request))


async def workers_fragment(request: Request) -> Response:
    return render(request, "_workers.html", fleet=await _fleet(request))


async def _fleet(request: Request) -> fleet.Fleet:
    client = dashboard(request).redis
    only = optional_queue_param(request)
    names = [only] if only else (await dashboard(request).queues.find()).queues
    return await fleet.fleet(client, names)


async def task_table(request: Request) -> tuple[list[history_reads.TaskRow], str, str | None]:
    client = dashboard(request).redis
    chosen = choice_param(request, "range", tuple(history_reads.TASK_RANGES))
    only = optional_queue_param(request)
    names = [only] if only else (await dashboard(request).queues.find()).queues[:QUEUES_PER_PAGE]
    rows = await history_reads.task_rows(client, names, chosen)
    errors: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name in {row.queue for row in rows}:
        for entry in await listing.settled_entries(client, QueueKeys.of(name)):
            if entry.get("outcome") != "completed" and entry.get("error"):
                shown = errors.setdefault((name, str(entry.get("task", ""))), [])
                if len(shown) < ERRORS_SHOWN:
                    shown.append(entry)
    for row in rows:
        row.errors.extend(errors.get((row.queue, row.task), []))
    return rows, chosen, only


async def tasks_page(request: Request) -> Response:
    rows, chosen, only = await task_table(request)
    return render(
        request,
        "tasks.html",
        rows=rows,
        range=chosen,
        ranges=tuple(history_reads.TASK_RANGES),
        only=only,
    )


async def search(request: Request) -> Response:
    """A job id: straight to its page when one queue has it; else say where it was looked for."""
    raw = request.query_params.get("id", "").strip()
    if not raw:
        return render(request, "search.html", wanted="", found=[], searched=0)
    job_id = ids.job_id(raw)
    located = await job_search.locate(dashboard(request).redis, dashboard(request).queues, job_id)
    if len(located.queues) == 1:
        return RedirectResponse(f"/queues/{located.queues[0]}/jobs/{job_id}", status_code=303)
    return render(
        request,
        "search.html",
        wanted=job_id,
        found=located.queues,
        searched=located.searched,
        complete=located.complete,
    )
