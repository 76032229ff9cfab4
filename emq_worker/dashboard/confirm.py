"""The confirm step of a destructive action: the form posted without `confirmed=yes` gets a page
that says what will happen and posts the same fields again with it (nothing changes before)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from emq_worker.dashboard.runtime import render

CONFIRMED = "confirmed"


@dataclass(frozen=True, slots=True)
class Ask:
    question: str
    """The page's heading: what a yes does."""
    action: str
    """Where the yes posts."""
    yes: str
    """The yes button's label."""
    button_id: str
    back: str
    """Where "No, go back" leads."""
    items: Sequence[str] = ()
    """The jobs concerned, listed under the question."""
    fields: Sequence[tuple[str, str]] = field(default_factory=list)
    """Hidden fields posted with the yes (besides the CSRF token and `confirmed`)."""


def confirmed(form: FormData) -> bool:
    return form.get(CONFIRMED) == "yes"


def ask_first(request: Request, ask: Ask) -> Response:
    return render(request, "confirm.html", ask=ask, confirmed_field=CONFIRMED)
