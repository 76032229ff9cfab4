"""A queue's page (counts, graphs, the lease timeline), a job's page, the dead letter: the HTML
pages, their live fragments and their JSON twins."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emq_worker.admin import render as admin_render
from emq_worker.admin import verbs
from emq_worker.dashboard import attempts, job_result, listing, reads
from emq_worker.dashboard.history_reads import RANGES
from emq_worker.dashboard.layout import lanes
from emq_worker.dashboard.params import (
    choice_param,
    job_param,
    open_queue,
    page_param,
)
from emq_worker.dashboard.runtime import dashboard, render
from emq_worker.errors import ConfigError
from emq_worker.protocol.names import Field

DEAD_LIMIT_DEFAULT = 100
DEAD_LIMIT_MAX = 1000


async def queue_page(request: Request) -> Response:
    queue = await open_queue(request)
    stats = await verbs.queue_stats(queue)
    timeline = await dashboard(request).leases.sample(queue.name)
    chosen = choice_param(request, "range", tuple(RANGES))
    return render(
        request,
        "queue.html",
        queue=queue.name,
        stats=stats,
        lanes=lanes(timeline),
        tab="leases",
        range=chosen,
        ranges=tuple(RANGES),
    )


async def queue_fragment(request: Request) -> Response:
    queue = await open_queue(request)
    stats = await verbs.queue_stats(queue)
    timeline = await dashboard(request).leases.sample(queue.name)
    return render(request, "_queue.html", queue=queue.name, stats=stats, lanes=lanes(timeline))


async def leases_json(request: Request) -> Response:
    queue = await open_queue(request)
    return JSONResponse((await dashboard(request).leases.sample(queue.name)).as_dict())


async def _job(request: Request) -> tuple[str, reads.JobView]:
    queue = await open_queue(request)
    job_id = job_param(request)
    try:
        return queue.name, await reads.job_view(queue, job_id)
    except verbs.UnknownJobError as exc:
        settled = await attempts.settled_of(queue.client, queue.name, job_id)
        result = await job_result.stored_result(queue.client, queue.name, job_id)
        if not settled and result is None:
            raise
        raise reads.GoneJobError(exc, settled, result) from exc


async def job_page(request: Request) -> Response:
    try:
        name, job = await _job(request)
    except reads.GoneJobError as gone:
        return render(
            request,
            "job_gone.html",
            status=404 if gone.result is None else 200,  # its result is what is left of it
            queue=request.path_params["queue"],
            job_id=request.path_params["job_id"],
            message=str(gone.cause),
            attempts=attempts.attempts([], gone.settled, None),
            result=gone.result,
        )
    history = admin_render.error_history(job.inspection.row.get(Field.ERROR_HISTORY, ""))
    settled = await attempts.settled_of(dashboard(request).redis, name, job.inspection.job_id)
    running = (job.attempt, job.holder) if job.inspection.where == "active" else None
    return render(
        request,
        "job.html",
        queue=name,
        job=job,
        inspection=job.inspection,
        attempts=attempts.attempts(history, settled, running),
    )


async def job_fragment(request: Request) -> Response:
    name, job = await _job(request)
    return render(request, "_job.html", queue=name, job=job, inspection=job.inspection)


async def job_json(request: Request) -> Response:
    """The job's page as JSON; a completed job (its row deleted) while its result is kept:
    `where` "completed", its `result` and the settled log's `settled` entries."""
    try:
        _, job = await _job(request)
    except reads.GoneJobError as gone:
        if gone.result is None:
            raise
        return JSONResponse(
            {
                "job_id": request.path_params["job_id"],
                "queue": request.path_params["queue"],
                "where": "completed",
                "result": gone.result.as_dict(),
                "settled": gone.settled,
            }
        )
    return JSONResponse(job.as_dict())


def dead_limit(request: Request) -> int:
    raw = request.query_params.get("limit", str(DEAD_LIMIT_DEFAULT))
    if not raw.isdigit() or not 1 <= int(raw) <= DEAD_LIMIT_MAX:
        raise ConfigError(f"limit must be a whole number from 1 to {DEAD_LIMIT_MAX}; got {raw!r}")
    return int(raw)


async def dead_page(request: Request) -> Response:
    queue = await open_queue(request)
    dead_limit(request)  # still checked: the page size is listing.PER_PAGE
    stats = await verbs.queue_stats(queue)
    order = choice_param(request, "order", ("oldest", "newest"))
    found = await listing.list_jobs(
        queue.client, queue.name, "dead", page_param(request), newest_first=order == "newest"
    )
    return render(
        request, "dead.html", queue=queue.name, stats=stats, listing=found, tab="dead", order=order
    )


async def dead_json(request: Request) -> Response:
    queue = await open_queue(request)
    view = await reads.dead_view(queue, dead_limit(request))
    jobs = [{"id": j.id, "attempts": j.attempts, "last_error": j.last_error} for j in view.jobs]
    return JSONResponse({"queue": queue.name, "total": view.counts.dead, "jobs": jobs})
