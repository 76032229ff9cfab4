"""A queue's fair lanes (jobs enqueued with a group): the page and its JSON twin.

Both read the lanes through the bounded `lanes` script (protocol/lane_verbs.py, the read behind
`emq-worker lanes list`): the deepest `top` lanes and the totals, one call, at most LANES_SCAN
group names read from each key that names them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emq_worker.admin import verbs
from emq_worker.dashboard.params import open_queue
from emq_worker.dashboard.runtime import render
from emq_worker.errors import ConfigError
from emq_worker.protocol.lane_verbs import LANES_SCAN, LanesView, read_lanes
from emq_worker.protocol.queue import Queue

TOP_DEFAULT = 50
TOP_MAX = 1000


def top_param(request: Request) -> int:
    raw = request.query_params.get("top", str(TOP_DEFAULT))
    if not raw.isdigit() or not 1 <= int(raw) <= TOP_MAX:
        raise ConfigError(f"top must be a whole number from 1 to {TOP_MAX}; got {raw!r}")
    return int(raw)


async def _lanes(request: Request) -> tuple[Queue, LanesView, int]:
    queue = await open_queue(request)
    top = top_param(request)
    return queue, await read_lanes(queue, top=top), top


async def lanes_page(request: Request) -> Response:
    queue, view, top = await _lanes(request)
    stats = await verbs.queue_stats(queue)
    return render(
        request,
        "lanes.html",
        queue=queue.name,
        stats=stats,
        groups=view,
        top=top,
        scan=LANES_SCAN,
        tab="lanes",
    )


async def lanes_json(request: Request) -> Response:
    """?top=N (1 to 1000, 50 by default): the deepest N lanes and the totals."""
    queue, view, top = await _lanes(request)
    return JSONResponse({"queue": queue.name, "top": top, **view.as_dict()})
