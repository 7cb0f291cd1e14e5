"""The project's one atomic write, and the cleanup of what a writer killed mid-write leaves behind.

Every file of a run folder (and every report a benchmark writes) goes through `atomic_write`, so a
reader, or a crash at any moment, sees the old file or the new one, never a part. Nothing else in
the project calls os.replace (tests/test_run_dir.py checks).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from trainer.run.processes import process_alive

_TEMPORARY_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def atomic_write(path: str | Path, data: bytes | str | Callable[[BinaryIO], None]) -> Path:
    """Write `data` (bytes, text as UTF-8, or a callback that writes into a binary file) to `path`
    so that a reader, or a crash at any moment (even SIGKILL), sees the old file or the new one,
    never a part: a temporary file in the same folder, fsync, os.replace, then fsync the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # pid (so prune can tell a dead writer's leftovers) + a random part (two threads, one file)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(temporary, "wb") as file:
            if callable(data):
                data(file)
            else:
                file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # only still there if the write failed
    _fsync_directory(path.parent)
    return path


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (some file systems lose it on power loss otherwise)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def remove_stale_temporaries(folder: str | Path) -> None:
    """Delete temporary files that atomic_write left behind in a process that died mid-write."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        match = _TEMPORARY_NAME.match(entry.name)
        if match and not process_alive(int(match.group("pid"))):
            entry.unlink(missing_ok=True)
