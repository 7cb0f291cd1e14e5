"""The run queue: at most `slots` runs train at once in a runs folder; the others wait in line.

The studio (studio/runs.py) and the sweep runner (trainer/sweep/runner.py) both take their slots
here, so a studio and any sweeps on the same runs folder share one count. The queue is one file,
`<runs_dir>/queue/queue.json` (trainer/run/layout.py QUEUE_LAYOUT), read and rewritten whole
(atomic_write) only under an exclusive lock on `queue.lock`.

    queue = RunQueue(runs_dir, slots=2)
    entry = queue.join("trial 7", weight=1)        # in line, behind everyone already there
    if queue.admit(entry):                         # first in line and a slot is free: it holds one
        process.start()
        queue.hand_over(entry, [process.pid])      # the slot lives as long as that process
    ...
    queue.release(entry)                           # the run ended (or was stopped while it waited)

An entry belongs to processes (pid, start time, host): while it waits, the process that will start
the run; once `hand_over` names them, the run's own processes. An entry none of whose processes
lives is dropped at the next change, so a killed holder's slots come back by themselves and a
killed sweep leaves no one in line. A studio's waiting entry (`kind` STUDIO) names its run folder
and survives its studio: once that studio is gone (or `orphan`s it at shutdown) it stays, out of
line, until the next studio on the folder `adopt`s it at its old place.

Each process counts against its own `slots` (give the studio and the sweeps the same number).
Imports neither torch nor the studio.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer.run.files import atomic_write
from trainer.run.layout import queue_lock_path, queue_path
from trainer.run.processes import process_alive, process_started

WAITING, HOLDING = "waiting", "holding"
STUDIO, SWEEP = "studio", "sweep"  # who put an entry in line: a studio's entry outlives its studio


def visible_gpus() -> int:
    """The NVIDIA GPUs this process may use, without importing torch: the driver's list
    (/proc/driver/nvidia/gpus), narrowed by CUDA_VISIBLE_DEVICES when it is set; 0 without any."""
    try:
        present = len(list(Path("/proc/driver/nvidia/gpus").iterdir()))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    chosen = [item for item in visible.split(",") if item.strip()]
    if chosen and chosen[0].strip().startswith("-"):  # "-1": none
        return 0
    return min(present, len(chosen))


def default_slots() -> int:
    """One slot per visible GPU on a machine that has them (a run takes the GPU by default), else
    one per CPU core this process may use (its affinity mask, capped by a container's CPU quota)."""
    from envs.cores import available_cores  # the project's one rule for usable cores

    return visible_gpus() or available_cores()


def resolve_slots(slots: int | None) -> int:
    """`slots`, or the machine's default (`default_slots`) for None; ValueError for less than 1."""
    if slots is None:
        return default_slots()
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be a whole number of at least 1, got {slots!r}")
    return slots


def _me() -> list:
    pid = os.getpid()
    return [pid, process_started(pid)]


def _process_lives(pid: int, started: float | None) -> bool:
    """The process lives (not a zombie), and is the same one that joined (a pid can be reused)."""
    if not process_alive(pid):
        return False
    try:
        import psutil

        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        now = float(process.create_time())
    except Exception:  # noqa: BLE001 - no psutil, or it ended in between: trust process_alive
        return process_alive(pid)
    return started is None or abs(now - started) < 2.0


@dataclass
class QueueEntry:
    """One run (or one sweep trial, all its seeds) in the queue."""

    id: str
    label: str  # what a person reads: "studio run cartpole-...", "sweep tiny, trial 7"
    weight: int  # slots it takes (a run on 2 ranks takes 2; a sweep trial, one per seed)
    kind: str  # STUDIO or SWEEP
    state: str = WAITING  # WAITING, then HOLDING
    since: float = field(default_factory=time.time)
    host: str = field(default_factory=socket.gethostname)
    processes: list = field(default_factory=list)  # [[pid, start time], ...]; [] = orphaned (waits for a studio)
    run_dir: str | None = None  # a studio run's folder
    resume: bool = False  # a studio run: resume it (True) or start it fresh

    def alive(self) -> bool:
        """Some process of the entry lives (one on another host cannot be checked: it counts as alive)."""
        if self.host != socket.gethostname():
            return bool(self.processes)
        return any(_process_lives(int(pid), started) for pid, started in self.processes)

    @classmethod
    def from_dict(cls, data: dict) -> QueueEntry:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


class RunQueue:
    """The run queue of one runs folder, as one process uses it (see the module's docstring)."""

    def __init__(self, runs_dir: str | os.PathLike, slots: int | None = None):
        self.runs_dir = Path(runs_dir)
        self._slots = None if slots is None else resolve_slots(slots)

    @property
    def slots(self) -> int:
        """How many slots this process counts with (the machine's default worked out when first asked:
        it imports the env package, and with it torch)."""
        if self._slots is None:
            self._slots = default_slots()
        return self._slots

    # ---- changing it (each call: lock, read, drop the dead, change, write if changed)

    def join(
        self,
        label: str,
        weight: int = 1,
        kind: str = SWEEP,
        run_dir: str | os.PathLike | None = None,
        resume: bool = False,
    ) -> str:
        """Put a run at the end of the line for `weight` slots; returns its entry's id."""
        entry = QueueEntry(
            id=uuid.uuid4().hex[:12],
            label=label,
            weight=max(1, int(weight)),
            kind=kind,
            processes=[_me()],
            run_dir=None if run_dir is None else str(Path(run_dir).resolve()),
            resume=resume,
        )
        with self._changing(create=True) as entries:
            entries.append(entry)
        return entry.id

    def admit(self, entry_id: str) -> bool | None:
        """Take the entry's slots if it is first in line and they are free: True (it holds them now,
        on behalf of this process until `hand_over`), False (it waits), None (it is gone from the
        queue: released by someone else, e.g. stopped from another studio)."""
        with self._changing() as entries:
            if any(entry.id == entry_id and entry.state == HOLDING for entry in entries):
                return True  # admitted before
            used = sum(entry.weight for entry in entries if entry.state == HOLDING)
            for entry in self._in_line(entries):
                if entry.id != entry_id:
                    break  # someone is ahead: first come, first served
                if used + min(entry.weight, self.slots) > self.slots:
                    return False
                entry.state, entry.processes, entry.since = HOLDING, [_me()], time.time()
                return True
            return False if any(entry.id == entry_id for entry in entries) else None

    def hand_over(self, entry_id: str, pids: list[int]) -> None:
        """The entry's slots are held by these processes now (the run's own): they stay taken while
        any of them lives, whatever happens to the process that started them."""
        with self._changing() as entries:
            for entry in entries:
                if entry.id == entry_id:
                    entry.processes = [[pid, process_started(pid)] for pid in pids] or entry.processes

    def release(self, entry_id: str) -> bool:
        """Take the entry out of the queue (its run ended, or it was stopped while it waited)."""
        with self._changing() as entries:
            kept = [entry for entry in entries if entry.id != entry_id]
            removed = len(kept) != len(entries)
            entries[:] = kept
        return removed

    def release_run(self, run_dir: str | os.PathLike) -> bool:
        """Take a studio run's waiting entry out of line, whichever studio waits for it."""
        target = str(Path(run_dir).resolve())
        with self._changing() as entries:
            kept = [entry for entry in entries if not (entry.state == WAITING and entry.run_dir == target)]
            removed = len(kept) != len(entries)
            entries[:] = kept
        return removed

    def orphan(self, entry_ids: list[str]) -> None:
        """Leave these waiting studio entries for the next studio (this one shuts down)."""
        with self._changing() as entries:
            for entry in entries:
                if entry.id in entry_ids and entry.state == WAITING and entry.kind == STUDIO:
                    entry.processes = []

    def adopt(self) -> list[QueueEntry]:
        """The studio entries no studio waits for any more, now waited for by this process, in line order."""
        adopted = []
        with self._changing() as entries:
            for entry in entries:
                if entry.kind == STUDIO and entry.state == WAITING and not entry.processes:
                    entry.processes = [_me()]
                    adopted.append(entry)
        return adopted

    # ---- reading it (no lock: the file is always whole)

    def entries(self) -> list[QueueEntry]:
        """The live holders and the waiters, in the order they joined."""
        return [entry for entry in self._read() if entry.state == HOLDING and entry.alive() or entry.state == WAITING]

    def place(self, entry_id: str) -> int | None:
        """The entry's place in line (1: the next to start); None when it is not waiting."""
        for place, entry in enumerate(self._in_line(self._read()), start=1):
            if entry.id == entry_id:
                return place
        return None

    def places(self) -> dict[str, int]:
        """Run folder -> place in line, for every studio run that waits (1: the next to start)."""
        return {
            entry.run_dir: place
            for place, entry in enumerate(self._in_line(self._read()), start=1)
            if entry.run_dir is not None
        }

    def busy(self) -> int:
        """Slots taken now (by live holders)."""
        return sum(entry.weight for entry in self._read() if entry.state == HOLDING and entry.alive())

    # ---- internals

    @staticmethod
    def _in_line(entries: list[QueueEntry]) -> Iterator[QueueEntry]:
        """The waiting entries that someone waits for, in order (orphaned ones keep their place
        in the file, out of line until a studio adopts them)."""
        return (entry for entry in entries if entry.state == WAITING and entry.processes and entry.alive())

    def _read(self) -> list[QueueEntry]:
        try:
            data = json.loads(queue_path(self.runs_dir).read_text(encoding="utf-8"))
            return [QueueEntry.from_dict(item) for item in data.get("entries", [])]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, AttributeError) as error:
            raise QueueError(
                f"{queue_path(self.runs_dir)} is unreadable ({error}); delete it to empty the run queue"
            ) from None

    @contextlib.contextmanager
    def _changing(self, create: bool = False) -> Iterator[list[QueueEntry]]:
        """The entries to change, under the lock; written back if changed. Without `create`, a runs
        folder that has no queue yet gets none (nothing is written there)."""
        if not create and not queue_path(self.runs_dir).is_file():
            yield []
            return
        with _file_lock(queue_lock_path(self.runs_dir)):
            before = self._read()
            entries = [entry for entry in before if _still_there(entry)]
            for entry in entries:
                if entry.state == WAITING and entry.processes and not entry.alive():
                    entry.processes = []  # its studio is gone: it waits for the next one
            old = [asdict(entry) for entry in before]
            yield entries
            new = [asdict(entry) for entry in entries]
            if new != old:
                atomic_write(queue_path(self.runs_dir), json.dumps({"entries": new}, indent=1))


class QueueError(RuntimeError):
    """The queue file cannot be read."""


def _still_there(entry: QueueEntry) -> bool:
    """Kept at a change: a holder while a process of it lives; a waiter while someone waits for it
    (a sweep's, while its sweep lives) or, a studio's, until its run folder is gone."""
    if entry.state == HOLDING:
        return entry.alive()
    if entry.kind == STUDIO:
        return entry.run_dir is not None and Path(entry.run_dir).is_dir()
    return entry.alive()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` between processes (and between threads: each call opens the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except ImportError:  # Windows
            import msvcrt

            msvcrt.locking(descriptor, msvcrt.LK_LOCK, 1)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
