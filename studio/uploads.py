"""The studio's uploads (a YAML config, a .pth to evaluate): where Gradio keeps them and how large
they may be.

Gradio writes every upload under GRADIO_TEMP_DIR (by default the shared /tmp/gradio, kept
forever). `keep_uploads_in` points it into the studio's own scratch folder (mode 0700, removed
when the studio exits); while the studio runs, Gradio's `delete_cache` drops uploads an hour
old (studio/ui.py). Gradio's `max_file_size` bounds each file; `UploadLimit` bounds each request
too, since one request may carry a thousand files, and the folder as a whole: past
`FOLDER_UPLOADS` uploads' worth, the oldest uploads (over a minute old) make room, and a request
that still does not fit gets 507.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from starlette.responses import JSONResponse

from studio.scratch import ScratchFolder

DEFAULT_MAX_UPLOAD = "200mb"
_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb)\s*$", re.IGNORECASE)
FORM_SLACK = 64 * 1024  # multipart headers and boundaries around the file bytes
DRAIN_BYTES = 32 * 1024**2  # of a refused upload, read and dropped so that the client sees the refusal
FOLDER_UPLOADS = 10  # the upload folder holds at most this many largest uploads
IN_USE_SECONDS = 60  # an upload younger than this may still be read by a callback: never removed


def parse_size(text: str | int) -> int:
    """'200mb' -> bytes (units b, kb, mb, gb; 1 kb = 1024 b), for `--max-upload-size`."""
    if isinstance(text, int) and text > 0:
        return text
    match = _SIZE.match(str(text))
    if not match or int(match.group(1)) < 1:
        raise ValueError(
            f"--max-upload-size expects a size such as 200mb, 50mb or 1gb (units b, kb, mb, gb), got {text!r}"
        )
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def human_size(size: int) -> str:
    """1048576 -> '1 MB': the limit as people wrote it."""
    for unit in ("gb", "mb", "kb"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]} {unit.upper()}"
    return f"{size} bytes"


def keep_uploads_in(scratch: ScratchFolder) -> Path:
    """Point Gradio's upload folder (GRADIO_TEMP_DIR) at `gradio/` inside the studio's scratch
    folder, unless the operator set GRADIO_TEMP_DIR (then that one is used, and is theirs to
    clean). Call before gradio is imported where possible: some of its routes read it at import."""
    global _OWNED
    if not os.environ.get("GRADIO_TEMP_DIR"):
        folder = scratch.path / "gradio"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.environ["GRADIO_TEMP_DIR"] = str(folder)
        _OWNED = folder
    return Path(os.environ["GRADIO_TEMP_DIR"])


_OWNED: Path | None = None  # the upload folder this process's studio made (and so may prune)


class UploadLimit:
    """ASGI middleware: a request to one of Gradio's upload routes may carry at most `max_bytes`
    (plus the form's framing), stated up front in Content-Length; 413 or 411 otherwise, before a
    byte is written to disk."""

    def __init__(self, app, max_bytes: int, folder: str | Path | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.folder = Path(folder) if folder else _OWNED  # None: an operator's folder, theirs to clean

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "").rstrip("/") if scope.get("type") == "http" else ""
        if scope.get("method") != "POST" or not path.endswith(("/upload", "/process_recording")):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if not length.isdigit():
            refusal = JSONResponse({"detail": "An upload must state its size (Content-Length)."}, status_code=411)
        elif int(length) > self.max_bytes + FORM_SLACK:
            refusal = JSONResponse(
                {
                    "detail": f"This upload is {int(length) / 1024**2:.1f} MB; the studio accepts "
                    f"at most {human_size(self.max_bytes)} per upload (python app.py "
                    f"--max-upload-size)."
                },
                status_code=413,
            )
        elif self.folder is not None and not make_room(self.folder, int(length), FOLDER_UPLOADS * self.max_bytes):
            refusal = JSONResponse(
                {
                    "detail": f"The studio's upload folder is full ({FOLDER_UPLOADS} uploads of "
                    f"{human_size(self.max_bytes)} arrived within the last minute); try "
                    f"again in a minute."
                },
                status_code=507,
            )
        else:
            await self.app(scope, receive, send)
            return
        await _discard_body(receive, DRAIN_BYTES)  # read (not stored), so that the client reads the answer
        await refusal(scope, receive, send)


async def _discard_body(receive, limit: int) -> None:
    """Read up to `limit` bytes of the request body and drop them; past that the server closes the
    connection after its answer, and a client still sending may see it reset instead."""
    read, more = 0, True
    while more and read <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        more = message.get("more_body", False)


def make_room(folder: Path, incoming: int, limit: int, now: float | None = None) -> bool:
    """Remove the oldest uploads (files over IN_USE_SECONDS old) until `incoming` more bytes fit
    under `limit`; False when they still do not fit."""
    import time

    now = time.time() if now is None else now
    files = []
    for path in folder.rglob("*") if folder.is_dir() else ():
        try:
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                files.append((stat.st_mtime, stat.st_size, path))
        except OSError:
            continue
    used = sum(size for _, size, _ in files)
    for mtime, size, path in sorted(files):
        if used + incoming <= limit or now - mtime < IN_USE_SECONDS:
            break
        try:
            path.unlink()
            used -= size
        except OSError:
            continue
    return used + incoming <= limit
