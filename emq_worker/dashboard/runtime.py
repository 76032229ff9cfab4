"""The dashboard's shared state (one per app) and the page renderer every view uses."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import jinja2
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from emq_worker.admin import verbs
from emq_worker.admin.flow_inspect import CHILDREN_SHOWN
from emq_worker.dashboard.queues import QueueFinder
from emq_worker.dashboard.security import CSRF_FIELD, Guard, set_csrf_cookie
from emq_worker.dashboard.settings import DashboardSettings
from emq_worker.dashboard.timeline import LeaseTracker
from emq_worker.dashboard.waiting import ParentFinder
from emq_worker.protocol.scripts import Scripts

FLASH_COOKIE = "emq_flash"
FLASH_SHOWN = 300
NO_VALUE = "\N{EN DASH}"


_Part = TypeVar("_Part")


class _Started(Generic[_Part]):
    """A part the lifespan makes (`Dashboard.attach`): read before it, a RuntimeError naming it."""

    def __init__(self, field: str, what: str) -> None:
        self.field = field
        self.what = what

    def __get__(self, owner: object, kind: type | None = None) -> _Part:
        part: _Part | None = getattr(owner, self.field)
        if part is None:
            raise RuntimeError(f"the dashboard has no {self.what} yet (lifespan not started)")
        return part


@dataclass(slots=True)
class Dashboard:
    settings: DashboardSettings
    guard: Guard
    templates: jinja2.Environment
    scripts: Scripts
    client: Redis | None = None
    tracker: LeaseTracker | None = None
    finder: QueueFinder | None = None
    waiting: ParentFinder | None = None

    def attach(self, client: Redis) -> None:
        self.client = client
        self.tracker = LeaseTracker(client)
        self.finder = QueueFinder(client)
        self.waiting = ParentFinder(client)

    redis = _Started[Redis]("client", "Redis client")
    queues = _Started[QueueFinder]("finder", "queue finder")
    parents = _Started[ParentFinder]("waiting", "parent finder")
    leases = _Started[LeaseTracker]("tracker", "lease tracker")


def dashboard(request: Request) -> Dashboard:
    return cast(Dashboard, request.app.state.dashboard)


def when(ms: int | None) -> str:
    if ms is None:
        return ""
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def relative(ms: int) -> str:
    """A time left (or past, when negative) as `in 2.5 s` or `0.8 s ago`."""
    return f"in {ms / 1000:.1f} s" if ms >= 0 else f"{-ms / 1000:.1f} s ago"


def span(ms: float | None) -> str:
    """A duration for people: `340 ms`, `2.5 s`, `4 min 10 s`, `3 h 5 min`."""
    if ms is None:
        return NO_VALUE
    if ms < 1000:
        return f"{ms:.3g} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours < 48 else f"{hours // 24} d {hours % 24} h"


def ratio(value: float | None) -> str:
    return NO_VALUE if value is None else f"{value * 100:.1f} %"


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("emq_worker.dashboard", "templates"),
        autoescape=True,  # payloads and error texts are untrusted: every value is escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["relative"] = relative
    env.filters["span"] = span
    env.filters["ratio"] = ratio
    env.globals["count_fields"] = verbs.COUNT_FIELDS
    env.globals["flow_shown"] = CHILDREN_SHOWN
    return env


def render(request: Request, name: str, status: int = 200, **values: Any) -> Response:
    """The template `name` with the values every page needs: the CSRF field, whether actions
    are on, the poll cadence, and a message left by the last action (shown once)."""
    dash = dashboard(request)
    nonce, new = dash.guard.csrf_nonce(request)
    flash = request.cookies.get(FLASH_COOKIE, "")[:FLASH_SHOWN]
    body = dash.templates.get_template(name).render(
        csrf_field=CSRF_FIELD,
        csrf=dash.guard.csrf_token(nonce),
        actions=dash.settings.allow_actions,
        poll_ms=dash.settings.poll_ms,
        flash=flash,
        **values,
    )
    response = HTMLResponse(body, status_code=status)
    if new:
        set_csrf_cookie(response, nonce)
    if flash and not name.startswith("_"):
        response.delete_cookie(FLASH_COOKIE, path="/")
    return response


def flash(response: Response, message: str) -> Response:
    response.set_cookie(
        FLASH_COOKIE, message[:FLASH_SHOWN], httponly=True, samesite="strict", path="/"
    )
    return response
