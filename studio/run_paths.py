"""Which run ids and files the studio accepts, and `RunError`, what a person reads when a request
about runs cannot be carried out.

A run id names one folder directly inside the runs folder; every file the studio hands to the
browser is checked to lie inside that folder (an event file may name any path).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
MAX_RUN_ID_LENGTH = 200  # a folder name (at most 255 bytes on common file systems)


class RunError(Exception):
    """A request about runs that cannot be carried out; the message is meant for people."""


class RunLimitError(RunError):
    """Starting one more run would exceed the studio's limit of concurrent runs."""


class UnknownRunError(RunError):
    """No run of that id exists in the runs folder."""


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is a plain run id; raise RunError otherwise.

    A run id names one folder directly inside the runs folder, so it may only hold
    letters, digits, '.', '_' and '-', and may not be '.' or '..'.
    """
    if not isinstance(run_id, str) or not run_id.strip():
        raise RunError("No run selected: pick a run first.")
    run_id = run_id.strip()
    if len(run_id) > MAX_RUN_ID_LENGTH:  # longer than a file name may be: never touch the disk with it
        raise RunError(
            f"That run id is {len(run_id):_} characters long ({run_id[:40]!r}...); run ids are at "
            f"most {MAX_RUN_ID_LENGTH} characters. Pick a run from the list."
        )
    if not RUN_ID_PATTERN.fullmatch(run_id) or run_id in (".", ".."):
        raise RunError(
            f"{run_id[:80]!r} is not a valid run id: run ids only contain letters, digits, '.', '_' and '-'."
        )
    return run_id


def is_inside(path: Path, folder: Path) -> bool:
    """True when `path` (after resolving links and '..') lies inside `folder`."""
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def safe_run_file(runs_dir: Path, path: str | os.PathLike | None) -> str | None:
    """`path` as a string if it is an existing file inside the runs folder, else None.

    Every file the studio hands to the browser goes through here: event files may name any
    path (a crafted metrics.jsonl could point at /etc/passwd), and only files inside the runs
    folder may be served.
    """
    if not path:
        return None
    candidate = Path(path)
    if not candidate.is_file() or not is_inside(candidate, runs_dir):
        return None
    return str(candidate.resolve())
