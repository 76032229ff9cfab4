"""The read-only pages and their live fragments (HTML) and JSON twins."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emq_worker.admin import verbs
from emq_worker.dashboard import reads
from emq_worker.dashboard.layout import lanes
from emq_worker.dashboard.runtime import dashboard, render
from emq_worker.errors import ConfigError
from emq_worker.protocol import ids
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue

DEAD_LIMIT_DEFAULT = 100
DEAD_LIMIT_MAX = 1000


def queue_param(request: Request) -> str:
    return validate_queue_name(request.path_params["queue"])


def job_param(request: Request) -> JobId:
    return ids.job_id(request.path_params["job_id"])


async def open_queue(request: Request) -> Queue:
    """The queue named in the path: QueueNameError (400) or UnknownQueueError (404)."""
    dash = dashboard(request)
    return await verbs.open_queue(dash.redis, dash.scripts, queue_param(request))


async def index(request: Request) -> Response:
    dash = dashboard(request)
    return render(request, "index.html", overview=await reads.overview(dash.redis, dash.scripts))


async def queues_fragment(request: Request) -> Response:
    dash = dashboard(request)
    return render(request, "_queues.html", overview=await reads.overview(dash.redis, dash.scripts))


async def queues_json(request: Request) -> Response:
    dash = dashboard(request)
    return JSONResponse((await reads.overview(dash.redis, dash.scripts)).as_dict())


async def queue_page(request: Request) -> Response:
    queue = await open_queue(request)
    stats = await verbs.queue_stats(queue)
    timeline = await dashboard(request).leases.sample(queue.name)
    return render(request, "queue.html", queue=queue.name, stats=stats, lanes=lanes(timeline))


async def queue_fragment(request: Request) -> Response:
    queue = await open_queue(request)
    stats = await verbs.queue_stats(queue)
    timeline = await dashboard(request).leases.sample(queue.name)
    return render(request, "_queue.html", queue=queue.name, stats=stats, lanes=lanes(timeline))


async def leases_json(request: Request) -> Response:
    queue = await open_queue(request)
    return JSONResponse((await dashboard(request).leases.sample(queue.name)).as_dict())


async def job_page(request: Request) -> Response:
    queue = await open_queue(request)
    job = await reads.job_view(queue, job_param(request))
    return render(request, "job.html", queue=queue.name, job=job, inspection=job.inspection)


async def job_fragment(request: Request) -> Response:
    queue = await open_queue(request)
    job = await reads.job_view(queue, job_param(request))
    return render(request, "_job.html", queue=queue.name, job=job, inspection=job.inspection)


async def job_json(request: Request) -> Response:
    queue = await open_queue(request)
    return JSONResponse((await reads.job_view(queue, job_param(request))).as_dict())


def dead_limit(request: Request) -> int:
    raw = request.query_params.get("limit", str(DEAD_LIMIT_DEFAULT))
    if not raw.isdigit() or not 1 <= int(raw) <= DEAD_LIMIT_MAX:
        raise ConfigError(f"limit must be a whole number from 1 to {DEAD_LIMIT_MAX}; got {raw!r}")
    return int(raw)


async def dead_page(request: Request) -> Response:
    queue = await open_queue(request)
    view = await reads.dead_view(queue, dead_limit(request))
    return render(request, "dead.html", queue=queue.name, view=view)


async def dead_json(request: Request) -> Response:
    queue = await open_queue(request)
    view = await reads.dead_view(queue, dead_limit(request))
    jobs = [{"id": j.id, "attempts": j.attempts, "last_error": j.last_error} for j in view.jobs]
    return JSONResponse({"queue": queue.name, "total": view.counts.dead, "jobs": jobs})
