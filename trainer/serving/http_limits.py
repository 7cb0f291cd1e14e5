"""The body side of an HTTP endpoint any client can reach: JSON only, size counted as it streams,
parsed with limits (off the event loop when large), every refusal a 4xx with a message. The
connection side (deadlines, connection cap, the server) is trainer/serving/http_server.py."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from starlette.requests import ClientDisconnect

MAX_BODY_BYTES = 16 * 1024 * 1024  # a request body, counted as it streams in (chunked or not)
BODY_BYTES_IN_FLIGHT = 256 * 1024**2  # all bodies held at once in this process (else 503): caps connections x body
MAX_JSON_DEPTH = 64  # nested lists / objects
MAX_NUMBER_CHARS = 40  # characters of one JSON number (int('9' * 5000) is slow, 1e400 is inf)
INLINE_PARSE_BYTES = 64 * 1024  # bodies up to this are parsed in the event loop (< 1 ms), larger in a thread


class BodyError(Exception):
    """A request refused: `status` (4xx, or 503 when the server is full) and `detail` for the client.
    `close`: the body was not read to its end, so the connection is closed after the answer."""

    def __init__(self, status: int, detail: str, close: bool = False):
        super().__init__(detail)
        self.status, self.detail, self.close = status, detail, close


# ---------------------------------------------------------------------------------------------
# The body: JSON only, read bounded, parsed bounded (off the event loop when large)


class _Budget:
    """Bytes of request bodies held by this process at once (thread-safe: each server has its own loop)."""

    def __init__(self, limit: int):
        self.limit, self.used, self.lock = limit, 0, threading.Lock()

    def take(self, count: int) -> None:
        with self.lock:
            if self.used + count > self.limit:
                raise BodyError(
                    503,
                    f"the server holds {self.limit // 2**20} MB of request bodies already; retry in a moment",
                    close=True,
                )
            self.used += count

    def give(self, count: int) -> None:
        with self.lock:
            self.used -= count


_BUDGET = _Budget(BODY_BYTES_IN_FLIGHT)


def check_json_content_type(request) -> None:
    """415 unless the request says `Content-Type: application/json` (a plain cross-origin form post can't)."""
    given = request.headers.get("content-type")
    if (given or "").split(";")[0].strip().lower() != "application/json":
        said = f"'{given[:100]}'" if given else "none"
        raise BodyError(
            415,
            f"the body must be JSON sent with 'Content-Type: application/json' (the request said {said})",
            close=True,
        )


async def read_json(
    request, max_bytes: int = MAX_BODY_BYTES, *, hint: str = "", convert: Callable[[Any], Any] | None = None
) -> Any:
    """The request's JSON body, or BodyError: a JSON content type, at most `max_bytes` (refused as
    soon as the stream passes it), the limits of `loads`; then `convert(value)` in the same thread.
    `hint` (what the endpoint expects) is added to the messages about the JSON itself."""
    check_json_content_type(request)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise BodyError(413, f"the body is {declared} bytes; at most {max_bytes}", close=True)
    held = 0
    try:
        body = bytearray()
        async for chunk in request.stream():
            _BUDGET.take(len(chunk))
            held += len(chunk)
            if len(body) + len(chunk) > max_bytes:
                raise BodyError(413, f"the body is over {max_bytes} bytes; at most {max_bytes}", close=True)
            body += chunk
        work = (lambda: loads(body, hint=hint)) if convert is None else (lambda: convert(loads(body, hint=hint)))
        return work() if len(body) <= INLINE_PARSE_BYTES else await asyncio.to_thread(work)
    except ClientDisconnect:
        raise BodyError(400, "the client closed the connection before the body ended", close=True) from None
    finally:
        _BUDGET.give(held)


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = np.zeros(256, np.int32)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1


def nesting_depth(document: bytes | bytearray) -> int:
    """How deep a valid JSON document's lists and objects nest (brackets outside strings)."""
    brackets = _STRING.sub(b"", document).translate(None, _NOT_BRACKET)
    return int(np.cumsum(_STEP[np.frombuffer(brackets, np.uint8)]).max()) if brackets else 0


def loads(
    document: bytes | bytearray | str,
    max_depth: int = MAX_JSON_DEPTH,
    max_number_chars: int = MAX_NUMBER_CHARS,
    hint: str = "",
) -> Any:
    """json.loads, refusing (BodyError 400/422) what is not JSON, nesting deeper than `max_depth`,
    numbers longer than `max_number_chars` or beyond a float's range, and NaN / Infinity."""
    suffix = f"; {hint}" if hint else ""

    def number(text: str, kind: type) -> int | float:
        if len(text) > max_number_chars:  # before int(): int('9' * 5000) is slow, then refused
            raise BodyError(
                422,
                f"a number in the body has {len(text)} characters ({text[:12]}...); at most {max_number_chars}{suffix}",
            )
        value = kind(text)
        if value in (math.inf, -math.inf):
            raise BodyError(422, f"the number {text} is beyond a float's range (about 1.8e308){suffix}")
        return value

    def parse_constant(text: str):
        raise BodyError(422, f"{text} is not a JSON number; send finite numbers{suffix}")

    too_deep = f"the body nests lists or objects more than {max_depth} levels deep{suffix}"
    try:
        value = json.loads(
            document,
            parse_int=lambda text: number(text, int),
            parse_constant=parse_constant,
            parse_float=lambda text: number(text, float),
        )
    except RecursionError:
        raise BodyError(400, too_deep) from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise BodyError(400, f"the body is not JSON ({str(error)[:200]}){suffix}") from None
    raw = document.encode() if isinstance(document, str) else document
    if raw.count(b"[") + raw.count(b"{") > max_depth and nesting_depth(raw) > max_depth:
        raise BodyError(400, too_deep)
    return value


def install_error_handlers(app) -> None:
    """Every refusal as JSON `{"detail": ...}`; an unexpected error as a 500 without its traceback
    (uvicorn still logs the traceback on the server)."""
    from fastapi.responses import JSONResponse

    async def refused(request, error: BodyError):
        return JSONResponse(
            {"detail": error.detail}, status_code=error.status, headers={"Connection": "close"} if error.close else None
        )

    async def failed(request, error: Exception):
        return JSONResponse(
            {"detail": "internal error: the server could not answer this request (logged on the server)"},
            status_code=500,
        )

    app.add_exception_handler(BodyError, refused)
    app.add_exception_handler(Exception, failed)
