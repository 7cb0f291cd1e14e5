"""Failed writes and full disks: the one place a run's storage failure becomes a message.

`storage_error` turns a failed write of a run file into a StorageError; `failure_message` is
what a run's `error` event (the studio's status line) and the CLI say about any failure, and
names the disk and the way out when the disk is full or the quota used up (ENOSPC / EDQUOT),
wherever in training that happened.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


class StorageError(OSError):
    """A run file (metrics.jsonl, a checkpoint, the final model, a GIF) could not be written.
    The run stops: history or checkpoints that silently stop being written are lost work.
    `path` is the file, `needed` the bytes the write needed (0: unknown)."""

    path: Path | None = None
    needed: int = 0


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # no space left, or the user's quota used up


def free_bytes(path: str | Path) -> int | None:
    """Free space on the disk holding `path` (measured at its nearest existing folder); None if unknown."""
    path = Path(path)
    try:
        return shutil.disk_usage(next(folder for folder in (path, *path.parents) if folder.exists())).free
    except (OSError, StopIteration):
        return None


def disk_full_message(folder: str | Path, written: str | Path | None = None, needed: int = 0) -> str:
    """The one description of a full disk (ENOSPC) or a used-up quota (EDQUOT), for the error
    event the studio shows, the CLI's line and StorageError alike: which disk, how much is free,
    and the way out."""
    free = free_bytes(folder)
    details = ([f"no space left on {written}"] if written else []) + (
        [f"about {needed / 1e6:.1f} MB needed"] if needed else []
    )
    details.append("the last checkpoint is intact: resume the run once there is room")
    free_text = f"{free / 1e6:.1f} MB free" if free is not None else "free space unknown"
    return (
        f"the disk holding {folder} is full ({free_text}): free space or choose another --runs-dir "
        f"({'; '.join(details)})"
    )


def failure_message(error: BaseException, run_dir: str | Path | None = None) -> str:
    """What a run's `error` event (and the CLI) says about `error`: an OSError with ENOSPC or
    EDQUOT anywhere in its chain names the disk holding `run_dir` (disk_full_message); anything
    else is `Type: message`."""
    seen, cause = [], error
    while cause is not None and len(seen) < 10:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    full = next((item for item in seen if isinstance(item, OSError) and item.errno in DISK_FULL_ERRNOS), None)
    if full is None:
        return f"{type(error).__name__}: {error}"
    written = getattr(full, "path", None) or full.filename
    folder = run_dir if run_dir is not None else Path(written).parent if written else Path.cwd()
    return disk_full_message(folder, written, getattr(full, "needed", 0))


def storage_error(path: str | Path, error: BaseException, needed: int = 0) -> StorageError:
    """The one translation of a failed write into a message a user can act on: disk_full_message
    when the disk is full (ENOSPC / EDQUOT, or less free space than the write needed: torch reports
    a full disk as "unexpected pos ..."), else "could not write <path>: <reason>"."""
    path = Path(path)
    free = free_bytes(path)
    code = getattr(error, "errno", None)
    if code in DISK_FULL_ERRNOS or (free is not None and free < needed):
        failure = StorageError(disk_full_message(path.parent, path, needed))
        failure.errno = code if code in DISK_FULL_ERRNOS else errno.ENOSPC
    else:
        failure = StorageError(f"could not write {path}: {getattr(error, 'strerror', None) or str(error)[:300]}")
        failure.errno = code or errno.EIO  # one-argument OSError: str() is the message alone
    failure.path, failure.needed = path, needed
    return failure
