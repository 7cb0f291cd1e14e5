"""The owner file: one process trains in a run folder at a time.

`train()` takes owner.json (`take_ownership`) before it writes anything and releases it when it
returns; a second trainer, a resume or a delete is refused while the owner lives.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.run.files import atomic_write
from trainer.run.layout import OWNER_FILE, owner_path
from trainer.run.processes import process_alive, process_started


class RunOwnedError(RuntimeError):
    """Another live process trains in this run folder."""


@dataclass(frozen=True)
class RunOwner:
    """Who trains in a run folder: written to owner.json when training starts, removed at the end."""

    pid: int
    host: str
    started_at: float  # when it took the folder (unix seconds)
    process_started: float | None  # the process's own start time: tells a reused pid apart

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"process {self.pid} on host {self.host}, training since {when}"

    def is_alive(self) -> bool:
        """True while the owner lives. An owner on another host cannot be checked from here, so it
        counts as alive (delete owner.json by hand if you know that process is gone)."""
        if self.host != socket.gethostname():
            return True
        if not process_alive(self.pid):
            return False
        started = process_started(self.pid)
        return self.process_started is None or started is None or abs(started - self.process_started) < 2.0

    def release(self, run_dir: str | Path) -> None:
        """Remove owner.json, if it still names this owner."""
        if read_owner(run_dir) == self:
            owner_path(run_dir).unlink(missing_ok=True)


def read_owner(run_dir: str | Path) -> RunOwner | None:
    """owner.json of a run folder, or None (none, or unreadable)."""
    try:
        data = json.loads(owner_path(run_dir).read_text(encoding="utf-8"))
        return RunOwner(
            pid=int(data["pid"]),
            host=str(data["host"]),
            started_at=float(data["started_at"]),
            process_started=None if data.get("process_started") is None else float(data["process_started"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_owner(run_dir: str | Path) -> RunOwner | None:
    """The process training in `run_dir` now, or None (no owner file, or its process is gone)."""
    owner = read_owner(run_dir)
    return owner if owner is not None and owner.is_alive() else None


def take_ownership(run_dir: str | Path) -> RunOwner:
    """Make this process the owner of `run_dir` (replacing a dead owner's file); RunOwnedError
    names the live owner otherwise. Release with `owner.release(run_dir)` when training ends."""
    run_dir = Path(run_dir)
    pid = os.getpid()
    owner = RunOwner(pid=pid, host=socket.gethostname(), started_at=time.time(), process_started=process_started(pid))
    target = owner_path(run_dir)
    for _ in range(3):
        current = read_owner(run_dir)
        if current is not None and current.is_alive() and current.pid != pid:
            raise RunOwnedError(
                f"{run_dir} is being trained by {current.describe()}; stop that run first (or wait "
                f"for it to end), or delete {target} if you know it is gone"
            )
        # Written whole under a temporary name, then linked into place: os.link fails if another
        # process linked its owner file first, so exactly one of two racing writers wins.
        staged = atomic_write(
            target.with_name(f".{OWNER_FILE}.{pid}.{uuid.uuid4().hex[:8]}"), json.dumps(asdict(owner))
        )
        try:
            if current is not None:
                target.unlink(missing_ok=True)  # a dead owner's, or our own earlier one
            os.link(staged, target)
            return owner
        except FileExistsError:
            continue  # someone else took it in between: look again who
        finally:
            staged.unlink(missing_ok=True)
    raise RunOwnedError(f"{run_dir}: could not take {OWNER_FILE} (other processes keep taking it)")
