"""Login throttling: whoever keeps sending wrong passwords has to wait, wherever the studio checks one.

Two places check the `--auth` password: Gradio's `POST /login` (400 for a wrong one) and the
studio's `GET /metrics` (HTTP basic auth, 401). Both answer as fast as a client can ask, so this
one ASGI middleware counts the failures of both, per (client address, user name): after
`max_failures` within `window_seconds` that pair gets `429 Too Many Requests` (with Retry-After)
for `lockout_seconds`, doubling on each further lockout; a success clears the pair (the counting
is trainer/serving/throttle.py's, the project's one throttle). Keyed on the user name too, one person's
typos do not lock out a whole office behind one proxy address; a much higher per-address ceiling
(`address_factor` x `max_failures`) stops one address from trying user name after user name.
Attempts still in flight count, so parallel guesses cannot slip past the count either. The
address is the socket's peer, never a header a client sets.
"""

from __future__ import annotations

import base64
import binascii
import time

from starlette.responses import JSONResponse

from trainer.serving.throttle import FailureThrottle, retry_after

MAX_LOGIN_BODY = 64 * 1024  # Gradio's login form is two short fields
MAX_USER_CHARS = 256  # longer user names are cut to this for the key (bounded memory)


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic ...` header; None when it is not one."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if colon else None


class LoginThrottle:
    """ASGI middleware over the studio's app: throttles failed logins at /login and /metrics."""

    def __init__(
        self,
        app,
        max_failures: int = 5,
        window_seconds: float = 60.0,
        lockout_seconds: float = 30.0,
        address_factor: int = 10,
        max_clients: int = 10_000,
        clock=time.monotonic,
    ):
        self.app = app
        # Each (address, user name) attempt is counted as a failure when it is passed on and cleared
        # by a success, so `max_failures` parallel guesses are all there is before the lockout.
        self.users = FailureThrottle(max_failures, window_seconds, lockout_seconds, max_clients, clock)
        # The ceiling per address counts answered failures only (successes must not use it up);
        # attempts in flight from one address are capped at the same number.
        self.addresses = FailureThrottle(
            max_failures * address_factor, window_seconds, lockout_seconds, max_clients, clock
        )
        self.max_in_flight = max_failures * address_factor
        self.in_flight: dict[str, int] = {}

    async def __call__(self, scope, receive, send):
        guarded = self._guarded(scope)
        if guarded is None:
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown",))[0]
        if guarded == "login":
            body = await _read_body(receive, MAX_LOGIN_BODY)
            if body is None:
                await JSONResponse({"detail": "The login form is too large."}, status_code=413)(scope, receive, send)
                return
            user = await _form_user(scope, body)
            receive = _replay(body, receive)
        else:
            user = (basic_credentials(_header(scope, b"authorization")) or ("", ""))[0]
        pair = (client, user.strip()[:MAX_USER_CHARS])
        user_wait = self.users.wait_left(pair)
        address_wait = max(
            self.addresses.wait_left(client), 1.0 if self.in_flight.get(client, 0) >= self.max_in_flight else 0.0
        )
        if user_wait > 0 or address_wait > 0:
            who = "for this user name from this address" if user_wait >= address_wait else "from this address"
            await self._refusal(max(user_wait, address_wait), guarded, who)(scope, receive, send)
            return
        status: dict = {}

        async def watch(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        self.users.failed(pair)  # until this attempt is answered a success
        self.in_flight[client] = self.in_flight.get(client, 0) + 1
        try:
            await self.app(scope, receive, watch)
        finally:
            self.in_flight[client] -= 1
            if not self.in_flight[client]:
                del self.in_flight[client]
            code = status.get("code")
            if code == 200:
                self.users.succeeded(pair)
            elif code in ((400, 401) if guarded == "login" else (401,)):
                self.addresses.failed(client)

    @staticmethod
    def _guarded(scope) -> str | None:
        """'login' or 'metrics' for the requests that check a password, else None."""
        if scope.get("type") != "http":
            return None
        path, method = scope.get("path", ""), scope.get("method")
        if method == "POST" and path.rstrip("/").endswith("/login"):
            return "login"
        if method == "GET" and path.rstrip("/") == "/metrics":
            return "metrics"
        return None

    @staticmethod
    def _refusal(seconds_left: float, guarded: str, who: str) -> JSONResponse:
        wait = retry_after(seconds_left)
        what = "logins" if guarded == "login" else "metrics logins"
        return JSONResponse(
            {"detail": f"Too many failed {what} {who}; try again in {wait} s."},
            status_code=429,
            headers={"Retry-After": str(wait)},
        )


async def _read_body(receive, limit: int) -> bytes | None:
    """The whole request body, or None when it is longer than `limit`."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def _replay(body: bytes, receive):
    """A `receive` that hands the app the body already read, then the client's later messages."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _form_user(scope, body: bytes) -> str:
    """The `username` field of a login form (url-encoded or multipart, as the browser sends it)."""
    from starlette.requests import Request

    request = Request(scope, _replay(body, _nothing_more))
    try:
        form = await request.form(max_files=0, max_fields=10)
    except Exception:  # noqa: BLE001 - a malformed form: Gradio refuses it; count it as no user name
        return ""
    try:
        user = form.get("username")
        return user if isinstance(user, str) else ""
    finally:
        await form.close()


async def _nothing_more():
    return {"type": "http.disconnect"}


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""
