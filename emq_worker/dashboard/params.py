"""What a request names: its queue, job, page and range, each checked (ConfigError: 400)."""

from __future__ import annotations

from starlette.requests import Request

from emq_worker.admin import verbs
from emq_worker.dashboard.runtime import dashboard
from emq_worker.errors import ConfigError
from emq_worker.protocol import ids
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue

MAX_PAGE = 1_000_000


def queue_param(request: Request) -> str:
    return validate_queue_name(request.path_params["queue"])


def job_param(request: Request) -> JobId:
    return ids.job_id(request.path_params["job_id"])


async def open_queue(request: Request) -> Queue:
    """The queue named in the path: QueueNameError (400) or UnknownQueueError (404)."""
    dash = dashboard(request)
    return await verbs.open_queue(dash.redis, dash.scripts, queue_param(request))


def page_param(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise ConfigError(f"page must be a whole number from 1 to {MAX_PAGE}; got {raw!r}")
    return int(raw)


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str:
    """A query parameter that must be one of `choices` (the first when absent)."""
    raw = request.query_params.get(name, choices[0])
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def optional_queue_param(request: Request) -> str | None:
    raw = request.query_params.get("queue", "")
    return validate_queue_name(raw) if raw else None
