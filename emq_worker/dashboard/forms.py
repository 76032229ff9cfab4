"""Reading the dashboard's own forms: URL-encoded, small, a bounded number of fields.

Parsed here with the standard library rather than through python-multipart: our forms never
upload files, and one dependency fewer is one less parser facing the network.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from emq_worker.dashboard.security import CSRF_FIELD, Guard, cross_origin
from emq_worker.errors import ConfigError

MAX_FORM_BYTES = 64 * 1024
MAX_FIELDS = 1000
URLENCODED = "application/x-www-form-urlencoded"


class FormTooLargeError(ConfigError):
    def __init__(self) -> None:
        super().__init__(f"form larger than {MAX_FORM_BYTES} bytes refused")


async def read_form(request: Request) -> FormData:
    """The posted form; ConfigError (400) when it is not URL-encoded or too large."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != URLENCODED:
        raise ConfigError(f"a form must be posted as {URLENCODED}; got {kind or '(none)'!r}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormTooLargeError()
    try:
        fields = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"malformed form: {exc}") from exc
    values: list[tuple[str, str | UploadFile]] = list(fields)
    return FormData(values)


async def guarded_form(request: Request, guard: Guard) -> FormData | Response:
    """The posted form once the guard lets it through, else the 403 that refuses it (a post
    from another site, or without the session's CSRF token)."""
    cross = cross_origin(request)  # before reading a byte of another site's form
    if cross:
        return PlainTextResponse(cross, status_code=403)
    form = await read_form(request)
    refusal = guard.refuse_post(request, str(form.get(CSRF_FIELD, "")))
    if refusal:
        return PlainTextResponse(refusal, status_code=403)
    return form
