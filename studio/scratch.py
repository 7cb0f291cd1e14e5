"""What the studio writes outside run folders, and what it shows of server paths.

`ScratchFolder`: one temporary folder per studio process (exported YAML, evaluation GIFs, ONNX
exports, and in a launched studio Gradio's uploads: studio/uploads.py), private to it (mode 0700),
reused by every click and removed when the process exits. It is made on the first file asked of
it (a launched studio: at start, for the uploads), so a Studio that exports and evaluates nothing
leaves nothing in /tmp.
`hide_server_paths`: messages name an uploaded file by its own name, never by where Gradio put
it on the server (/tmp/gradio/<sha256>/...).
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

KEEP_FILES = 20  # per kind: enough for every tab open at once to still show its latest file

_TEMP_PATH = re.compile(r"(?:/[^\s'\"/:]+)*/(?:gradio|tmp[^\s'\"/]*)/[^\s'\"]*")


class ScratchFolder:
    """A temporary folder for this studio process; `file(kind, name)` paths inside it."""

    def __init__(self, prefix: str = "rl-studio-"):
        self.prefix = prefix
        self._path: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()  # two first clicks at once make one folder

    @property
    def path(self) -> Path:
        """The folder, made now if this is the first time it is needed."""
        with self._lock:
            if self._path is None:
                self._path = Path(tempfile.mkdtemp(prefix=self.prefix))
                # Removed at interpreter exit, or when the studio object goes away (tests build many).
                self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._path), True)
                atexit.register(self._finalizer)
            return self._path

    @property
    def exists(self) -> bool:
        return self._path is not None and self._path.is_dir()

    def file(self, kind: str, name: str) -> Path:
        """A path for a new file `name` under `kind`/, dropping all but the newest KEEP_FILES there."""
        folder = self.path / kind
        folder.mkdir(parents=True, exist_ok=True)
        existing = sorted((entry for entry in folder.iterdir() if entry.is_file()), key=lambda p: p.stat().st_mtime)
        for old in existing[: -KEEP_FILES + 1] if len(existing) >= KEEP_FILES else []:
            old.unlink(missing_ok=True)
        return folder / name

    def cleanup(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


def hide_server_paths(text: str, *paths: str | Path | None) -> str:
    """`text` with each of `paths` replaced by its file name, and any other temp-folder path too."""
    for path in paths:
        if path:
            text = text.replace(str(path), Path(path).name)
            try:
                text = text.replace(str(Path(path).resolve()), Path(path).name)
            except OSError:
                pass
    return _TEMP_PATH.sub(lambda match: Path(match.group(0)).name, text)
