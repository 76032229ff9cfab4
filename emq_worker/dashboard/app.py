"""The ASGI application: routes, the Redis client's lifespan, error pages, the login form."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ExceptionHandler

from emq_worker.admin import verbs, worker_control
from emq_worker.dashboard import actions, api, bulk_actions, groups, pages, views
from emq_worker.dashboard.forms import guarded_form
from emq_worker.dashboard.runtime import Dashboard, dashboard, render, templates
from emq_worker.dashboard.security import (
    Guard,
    GuardMiddleware,
    set_session_cookie,
)
from emq_worker.dashboard.settings import DashboardSettings
from emq_worker.errors import ConfigError, EmqError, JobIdError
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.connection import connect, redacted

STATIC = Path(__file__).parent / "static"
LISTED = ("pending", "scheduled", "active", "completed", "waiting", "retries")
"""The states with a page of their own under /queues/<q>/ (dead has its page, with actions)."""


async def login_page(request: Request) -> Response:
    if dashboard(request).guard.token is None:
        return RedirectResponse("/", status_code=303)
    return render(request, "login.html", failed=False)


async def login(request: Request) -> Response:
    guard = dashboard(request).guard
    if guard.token is None:
        return RedirectResponse("/", status_code=303)
    form = await guarded_form(request, guard)
    if isinstance(form, Response):
        return form
    if not guard.token_matches(str(form.get("token", ""))):
        return render(request, "login.html", status=401, failed=True)
    response = RedirectResponse("/", status_code=303)
    set_session_cookie(response, guard)
    return response


async def healthz(request: Request) -> Response:
    """200 while Redis answers a PING (open without the token: it shows nothing else)."""
    try:
        await dashboard(request).redis.ping()
    except RedisError:
        return PlainTextResponse("redis unreachable\n", status_code=503)
    return PlainTextResponse("ok\n")


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico on every page; the icon is the static SVG."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


def error_page(status: int) -> ExceptionHandler:
    async def handle(request: Request, exc: Exception) -> Response:
        message = str(exc)
        if isinstance(exc, RedisError) and not isinstance(exc, EmqError):
            message = f"redis at {redacted(dashboard(request).settings.redis_url)}: {exc}"
        if request.url.path.startswith("/api/") or request.url.path.startswith("/fragments/"):
            return PlainTextResponse(message, status_code=status)
        return render(request, "error.html", status=status, message=message)

    return handle


ERRORS: dict[type[Exception], int] = {
    ConfigError: 400,  # a malformed queue name, limit or form
    JobIdError: 400,
    verbs.UnknownQueueError: 404,
    verbs.UnknownJobError: 404,
    worker_control.UnknownWorkerError: 404,
    verbs.AdminError: 409,  # held by a worker, not running, not scheduled, ...
    RedisError: 503,
}

ROUTES = [
    Route("/", pages.index),
    Route("/healthz", healthz),
    Route("/favicon.ico", favicon),
    Route("/login", login_page, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/workers", pages.workers_page),
    Route("/workers/quiet", actions.quiet_worker, methods=["POST"]),
    Route("/workers/stop", actions.stop_worker, methods=["POST"]),
    Route("/tasks", pages.tasks_page),
    Route("/search", pages.search),
    Route("/fragments/queues", pages.queues_fragment),
    Route("/fragments/workers", pages.workers_fragment),
    Route("/fragments/queues/{queue}", views.queue_fragment),
    Route("/fragments/queues/{queue}/jobs/{job_id}", views.job_fragment),
    Route("/api/queues", api.queues_json),
    Route("/api/history", api.history_json),
    Route("/api/sparks", api.sparks_json),
    Route("/api/workers", api.workers_json),
    Route("/api/tasks", api.tasks_json),
    Route("/api/queues/{queue}/jobs", api.jobs_json),
    Route("/api/queues/{queue}/leases", views.leases_json),
    Route("/api/queues/{queue}/dead", views.dead_json),
    Route("/api/queues/{queue}/lanes", groups.lanes_json),
    Route("/api/queues/{queue}/jobs/{job_id}", views.job_json),
    Route("/queues/{queue}", views.queue_page),
    *(Route(f"/queues/{{queue}}/{state}", pages.state_page, name=state) for state in LISTED),
    Route("/queues/{queue}/dead", views.dead_page),
    Route("/queues/{queue}/lanes", groups.lanes_page),
    Route("/queues/{queue}/jobs/{job_id}", views.job_page),
    Route("/queues/{queue}/pause", actions.pause, methods=["POST"]),
    Route("/queues/{queue}/resume", actions.resume, methods=["POST"]),
    Route("/queues/{queue}/dead/retry", actions.retry, methods=["POST"]),
    Route("/queues/{queue}/dead/purge", actions.purge, methods=["POST"]),
    Route("/queues/{queue}/jobs/{job_id}/cancel", actions.cancel, methods=["POST"]),
    Route("/queues/{queue}/promote", bulk_actions.promote_ticked, methods=["POST"]),
    Route("/queues/{queue}/delete", bulk_actions.delete_ticked, methods=["POST"]),
    Route("/queues/{queue}/jobs/{job_id}/promote", actions.promote, methods=["POST"]),
    Route("/queues/{queue}/jobs/{job_id}/delete", actions.delete, methods=["POST"]),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


def create_app(settings: DashboardSettings, client: Redis | None = None) -> Starlette:
    """The dashboard. Without `client` it connects (version-fenced) at start-up and closes the
    client at shutdown; with one (tests) it uses it and leaves it open."""
    guard = Guard(settings.token, settings.allow_actions)
    state = Dashboard(settings, guard, templates(), Scripts())
    if client is not None:
        state.attach(client)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if client is not None:
            yield
            return
        own = connect(
            settings.redis_url, settings.wire_version, socket_timeout_s=settings.socket_timeout_s
        )
        try:
            await own.ping()
            state.attach(own)
            yield
        finally:
            await own.aclose()

    app = Starlette(
        routes=ROUTES,
        middleware=[Middleware(GuardMiddleware, guard=guard)],
        exception_handlers={kind: error_page(status) for kind, status in ERRORS.items()},
        lifespan=lifespan,
    )
    app.state.dashboard = state
    return app
