"""Who may look, who may act, and proof that a form was posted from our own pages.

- A token (when configured) guards every page: the login form sets a session cookie signed with a
  per-process secret, or a client sends `Authorization: Bearer <token>`.
- Every action is a POST that carries a CSRF token in a hidden field: an HMAC of a random nonce
  kept in a SameSite=Lax, HttpOnly cookie, keyed by the per-process secret. A cross-origin
  request (its Origin, or Sec-Fetch-Site, naming another site) is refused before the form is read.
- Every response carries a Content-Security-Policy that allows only our own script and styles,
  so even a payload that slipped past escaping could not run.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_COOKIE = "emq_session"
CSRF_COOKIE = "emq_csrf"
CSRF_FIELD = "csrf"
OPEN_PATHS = ("/login", "/static/", "/healthz", "/favicon.ico")
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


class Guard:
    def __init__(self, token: str | None, allow_actions: bool) -> None:
        self.token = token
        self.allow_actions = allow_actions
        self._secret = secrets.token_bytes(32)

    def _sign(self, value: str) -> str:
        return hmac.new(self._secret, value.encode(), hashlib.sha256).hexdigest()

    # --- who may look --------------------------------------------------------------------

    def session_value(self) -> str:
        return self._sign("session")

    def token_matches(self, offered: str) -> bool:
        return self.token is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    def authenticated(self, request: Request) -> bool:
        if self.token is None:
            return True
        scheme, _, offered = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(offered.strip()):
            return True
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self.session_value().encode())

    # --- forms ---------------------------------------------------------------------------

    def csrf_nonce(self, request: Request) -> tuple[str, bool]:
        """The request's CSRF nonce, and whether it is new (the response must set it)."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if len(nonce) == 32 and all(c in "0123456789abcdef" for c in nonce):
            return nonce, False
        return secrets.token_hex(16), True

    def csrf_token(self, nonce: str) -> str:
        return self._sign("csrf:" + nonce)

    def refuse_post(self, request: Request, offered: str) -> str | None:
        """Why this POST is refused, or None when it comes from one of our pages."""
        cross = cross_origin(request)
        if cross:
            return cross
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if not nonce or not hmac.compare_digest(offered.encode(), self.csrf_token(nonce).encode()):
            return "the form's CSRF token is missing or stale: reload the page and try again"
        return None


def cross_origin(request: Request) -> str | None:
    origin = request.headers.get("origin")
    if origin is not None:
        if urlsplit(origin).netloc != request.headers.get("host", ""):
            return f"cross-origin request from {origin!r} refused"
        return None
    site = request.headers.get("sec-fetch-site")
    if site not in (None, "same-origin", "none"):
        return f"cross-site request ({site}) refused"
    return None


def set_csrf_cookie(response: Response, nonce: str) -> None:
    response.set_cookie(CSRF_COOKIE, nonce, httponly=True, samesite="lax", path="/")


def set_session_cookie(response: Response, guard: Guard) -> None:
    response.set_cookie(
        SESSION_COOKIE, guard.session_value(), httponly=True, samesite="lax", path="/"
    )


class GuardMiddleware:
    """Asks for the token on every page but the login form and static files, and adds the
    security headers to every response."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {bytes(name).lower() for name, _ in message.get("headers", [])}
                extra = [
                    (k.encode(), v.encode())
                    for k, v in HEADERS.items()
                    if k.encode() not in present
                ]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        request = Request(scope)
        if not scope["path"].startswith(OPEN_PATHS) and not self.guard.authenticated(request):
            response = self._login_first(request)
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _login_first(self, request: Request) -> Response:
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse("/login", status_code=303)
        return PlainTextResponse("a token is required: log in at /login", status_code=401)
