"""A run as the studio sees it: `RunState`, built from the run's events, and `RunFollower`, which
reads those events from the run folder's metrics.jsonl.

Every run is followed the same way, whether this studio started it or found it on disk (an
earlier studio, the CLI): the follower reads only the lines metrics.jsonl gained since its last
look, and the run's state comes from one rule (`trainer.run.status.run_status`) fed with its events
and with whether its owner process lives. Readers call `snapshot()` and get a consistent copy,
so a browser session never sees a half-applied event.

No gradio, no torch: this is tested on its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from studio.snapshot import ACTIVE_STATUSES, RESUMABLE_STATUSES, GifInfo, RunSnapshot, as_bool, as_float, as_int  # noqa: F401 - RESUMABLE_STATUSES re-exported: the studio's names for a run
from trainer.run.layout import NOTES_FILE, events_path, find_final_model, latest_checkpoint_path, read_config
from trainer.run.notes import RunNotes, read_run_notes
from trainer.run.status import QUEUED, run_status

LOG_TAIL_LINES = 400
# Metrics points a run keeps in memory (a multi-hour run logs ~10 KB per update): every point up
# to the cap, then every 2nd, 4th, ... (the last one always exact). metrics.jsonl keeps them all.
MAX_METRIC_POINTS = 2000
TRACEBACK_TAIL_LINES = 15
INTERRUPTED_MESSAGE = (
    "This run ended without an end event (its trainer was killed, or the machine stopped). "
    "Resume continues from the last checkpoint."
)


@dataclass
class RunState:
    """Everything the studio knows about one run, built from its events (see
    docs/architecture.md, "Events") and from whether its owner process lives."""

    run_id: str
    run_dir: Path
    config: dict = field(default_factory=dict)
    status: str = "starting"
    managed: bool = False  # started by this studio (its process belongs to the RunManager)
    owner_alive: bool = True  # the process training it lives (set by whoever follows the run)
    stopping: bool = False  # a stop was asked for by this studio
    launch_mark: tuple[int, int] | None = None  # (starts, ends) seen when this studio launched its segment
    queue_place: int | None = None  # waiting in the run queue (trainer/run/run_queue.py): its place in line
    total_timesteps: int | None = None
    step: int = 0
    device: str | None = None
    metrics: list[dict] = field(default_factory=list)  # downsampled: see keep_metrics
    metrics_seen: int = 0  # metrics events of this run so far (kept or not)
    metrics_stride: int = 1  # `metrics` holds every metrics_stride-th of them ...
    metrics_extra_last: bool = False  # ... plus the latest one, when it is off that grid
    best_return: float | None = None  # over every metrics event, not only the kept ones
    log_lines: deque = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    log_count: int = 0
    gifs: list[GifInfo] = field(default_factory=list)
    latest_checkpoint: str | None = None
    final_model: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    started: bool = False  # a `start` came after the latest `end`
    end_status: str | None = None  # the latest `end`'s status, unless a `start` followed it
    start_count: int = 0
    end_count: int = 0
    started_at: float | None = None
    segment_started_at: float | None = None
    finished_segments_seconds: float = 0.0
    last_event_at: float | None = None
    notes: RunNotes = field(default_factory=RunNotes)  # notes.json: a person's name and notes for the run
    version: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    _KEPT_ON_CLEAR = (
        "run_id",
        "run_dir",
        "config",
        "managed",
        "owner_alive",
        "stopping",
        "launch_mark",
        "queue_place",
        "notes",
        "lock",
    )

    # ---- writing

    def apply(self, event: dict) -> None:
        """Fold one trainer event into the state."""
        if not isinstance(event, dict):
            return
        with self.lock:
            event_time = as_float(event.get("time")) or time.time()
            handler = _EVENT_HANDLERS.get(event.get("type"))
            if handler is not None:
                handler(self, event, event_time)
            self.last_event_at = event_time
            self.version += 1
            self.settle()

    def clear(self) -> None:
        """Forget every event (metrics.jsonl was rewritten: it is read again from the start)."""
        with self.lock:
            for item in fields(self):
                if item.name not in self._KEPT_ON_CLEAR:
                    default = item.default_factory() if callable(item.default_factory) else item.default
                    setattr(self, item.name, default)

    def settle(self, owner_alive: bool | None = None) -> str:
        """Recompute `status` with the one rule; `owner_alive` updates what is known of the owner."""
        with self.lock:
            if owner_alive is not None:
                self.owner_alive = owner_alive
            end_status, started = self.end_status, self.started
            if self.launch_mark is not None:  # events before this studio's launch belong to earlier segments
                starts, ends = self.launch_mark
                end_status = end_status if self.end_count > ends else None
                started = self.start_count > starts
            status = run_status(end_status, self.owner_alive, started, self.stopping, self.queue_place is not None)
            if status != self.status:
                self.status = status
                self.version += 1
            if status == "interrupted" and not self.error_message:
                self.error_message = INTERRUPTED_MESSAGE
            elif status != "interrupted" and self.error_message == INTERRUPTED_MESSAGE:
                # Seen before its owner took the folder (a CLI run listed in its first moment),
                # then it trained after all: not interrupted any more.
                self.error_message = None
            return status

    def begin_segment(self) -> None:
        """This studio is about to launch a trainer for the run (a start or a resume)."""
        with self.lock:
            self.managed, self.stopping = True, False
            self.launch_mark = (self.start_count, self.end_count)
            self.error_message = self.error_traceback = None
            self.settle(owner_alive=True)

    def _on_start(self, event: dict, event_time: float) -> None:
        if self.segment_started_at is not None and self.last_event_at is not None:
            self.finished_segments_seconds += max(0.0, self.last_event_at - self.segment_started_at)
        self.segment_started_at = event_time
        if self.started_at is None:
            self.started_at = event_time
        if isinstance(event.get("config"), dict):
            self.config = event["config"]
        self.device = event.get("device") or self.device
        self.total_timesteps = as_int(event.get("total_timesteps")) or self.total_timesteps
        resumed_from = as_int(event.get("resumed_from_step"))
        if resumed_from:
            # Curves continue from the checkpoint: drop what the interrupted segment logged
            # after it, so no step appears twice.
            self.metrics = [m for m in self.metrics if (m.get("step") or 0) <= resumed_from]
            self.metrics_extra_last = False  # the latest kept point is now a grid point or close to one
            returns = [r for r in (as_float(m.get("episode_return_mean")) for m in self.metrics) if r is not None]
            self.best_return = max(returns) if returns else None
            self.step = resumed_from
        self.started, self.end_status = True, None
        self.start_count += 1
        self.error_message = self.error_traceback = None

    def _on_metrics(self, event: dict, event_time: float) -> None:
        self.keep_metrics(event)
        value = as_float(event.get("episode_return_mean"))
        if value is not None and (self.best_return is None or value > self.best_return):
            self.best_return = value
        self.step = as_int(event.get("step")) or self.step

    def keep_metrics(self, event: dict) -> None:
        """Add one metrics event to the bounded, downsampled `metrics`: the first point and the
        latest are always there, and between them points evenly spaced in updates."""
        index = self.metrics_seen
        self.metrics_seen += 1
        if self.metrics_extra_last:
            self.metrics.pop()  # the previous latest, kept only because it was the latest
        self.metrics.append(event)
        self.metrics_extra_last = index % self.metrics_stride != 0
        if len(self.metrics) <= MAX_METRIC_POINTS:
            return
        grid = self.metrics[:-1] if self.metrics_extra_last else self.metrics
        self.metrics_stride *= 2
        thinned = grid[::2]  # grid[k] is event k * stride: the even k are the new grid
        self.metrics_extra_last = index % self.metrics_stride != 0
        self.metrics = thinned + [event] if self.metrics_extra_last else thinned

    def _on_log(self, event: dict, event_time: float) -> None:
        level = str(event.get("level") or "info")
        message = str(event.get("message") or "")
        prefix = "" if level == "info" else f"{level.upper()}: "
        for line in message.splitlines() or [""]:
            self.log_lines.append(prefix + line)
            self.log_count += 1

    def _on_checkpoint(self, event: dict, event_time: float) -> None:
        self.latest_checkpoint = _local_path(self.run_dir, event.get("path"))

    def _on_gif(self, event: dict, event_time: float) -> None:
        path = _local_path(self.run_dir, event.get("path"))
        if path:
            self.gifs.append(
                GifInfo(
                    path=path,
                    step=as_int(event.get("step")) or 0,
                    episode_return=as_float(event.get("episode_return")),
                    episode_score=as_float(event.get("episode_score")),
                    steps_shown=as_int(event.get("steps_shown")),
                    episode_steps=as_int(event.get("episode_steps")),
                    episode_ended=as_bool(event.get("episode_ended")),
                    recorded_at=event_time - (as_float(event.get("seconds")) or 0.0),
                )
            )

    def _on_model(self, event: dict, event_time: float) -> None:
        self.final_model = _local_path(self.run_dir, event.get("path"))

    def _on_error(self, event: dict, event_time: float) -> None:
        self.error_message = str(event.get("message") or "The trainer failed.")
        self.error_traceback = str(event.get("traceback") or "") or None

    def _on_end(self, event: dict, event_time: float) -> None:
        self.end_status = str(event.get("status") or "failed")
        self.started = False
        self.stopping = False  # asked of this segment; a later one (a CLI resume) is not stopping
        self.end_count += 1
        self.step = as_int(event.get("step")) or self.step
        self.final_model = _local_path(self.run_dir, event.get("final_model")) or self.final_model

    # ---- reading

    def snapshot(self) -> RunSnapshot:
        with self.lock:
            checkpoint = self.latest_checkpoint or latest_checkpoint_path(self.run_dir, self.config or None)
            return RunSnapshot(
                run_id=self.run_id,
                run_dir=self.run_dir,
                config=dict(self.config),
                status=self.status,
                managed=self.managed,
                total_timesteps=self.total_timesteps or as_int(self.config.get("total_timesteps")),
                step=self.step,
                device=self.device,
                metrics=list(self.metrics),
                update_count=self.metrics_seen,
                best_return=self.best_return,
                log_tail=list(self.log_lines),
                log_count=self.log_count,
                latest_gif=self.gifs[-1] if self.gifs else None,
                gif_count=len(self.gifs),
                latest_checkpoint=str(checkpoint) if checkpoint else None,
                final_model=self.final_model,
                error_message=self.error_message,
                error_traceback=_tail(self.error_traceback, TRACEBACK_TAIL_LINES),
                started_at=self.started_at,
                wall_seconds=self._wall_seconds(),
                name=self.notes.name,
                notes=self.notes.notes,
                version=self.version,
                queue_place=self.queue_place if self.status == QUEUED else None,
            )

    def _wall_seconds(self) -> float:
        if self.segment_started_at is None:
            return 0.0
        if self.status in ACTIVE_STATUSES and self.status != QUEUED:  # a queued resume's clock waits too
            segment_end = time.time()
        else:
            segment_end = self.last_event_at or self.segment_started_at
        return self.finished_segments_seconds + max(0.0, segment_end - self.segment_started_at)


_EVENT_HANDLERS: dict[str, Callable[[RunState, dict, float], None]] = {
    "start": RunState._on_start,
    "metrics": RunState._on_metrics,
    "log": RunState._on_log,
    "checkpoint": RunState._on_checkpoint,
    "gif": RunState._on_gif,
    "model": RunState._on_model,
    "error": RunState._on_error,
    "end": RunState._on_end,
}


# --------------------------------------------------------------------------- following a run folder


class RunFollower:
    """Follows one run folder: `refresh(owner_alive)` reads the lines metrics.jsonl gained since the
    last call (a rewritten file, e.g. trimmed by a resume, is read again from the start) and
    settles the state. Callers check the owner *before* refreshing: an owner seen dead has
    written everything it will write, so its `end`, if any, is read in the same call."""

    def __init__(self, run_id: str, run_dir: Path, state: RunState | None = None):
        self.state = state or RunState(run_id=run_id, run_dir=run_dir)
        if not self.state.config:
            self.state.config = read_config(run_dir)
        self._offset = 0
        self._partial = b""
        self._identity: tuple[int, int] | None = None
        self._notes_identity: tuple | None = None

    def refresh(self, owner_alive: bool) -> RunState:
        state = self.state
        try:
            stat = events_path(state.run_dir).stat()
        except OSError:
            stat = None
        with state.lock:
            if stat is not None:
                self._read_new_lines(stat)
            state.settle(owner_alive)
            self._read_notes()
            if state.final_model is None and not owner_alive:
                found = find_final_model(state.run_dir)
                state.final_model = str(found) if found else None
        return state

    def _read_notes(self) -> None:
        """notes.json again when it changed (one stat a refresh): another tab or studio may have
        renamed the run."""
        try:
            stat = (Path(self.state.run_dir) / NOTES_FILE).stat()
            identity: tuple | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            identity = None
        if identity != self._notes_identity:
            self._notes_identity = identity
            notes = read_run_notes(self.state.run_dir) if identity else RunNotes()
            if notes != self.state.notes:
                self.state.notes = notes
                self.state.version += 1

    def _read_new_lines(self, stat) -> None:
        identity = (stat.st_ino, stat.st_dev)
        if identity != self._identity or stat.st_size < self._offset:
            if self._identity is not None:
                self.state.clear()  # replaced or truncated: read it again
            self._offset, self._partial, self._identity = 0, b"", identity
        if stat.st_size <= self._offset:
            return
        with open(events_path(self.state.run_dir), "rb") as events_file:
            events_file.seek(self._offset)
            data = self._partial + events_file.read()
            self._offset = events_file.tell()
        *lines, self._partial = data.split(b"\n")  # a torn last line waits for the rest
        for line in lines:
            event = _parse_event_line(line)
            if event is not None:
                self.state.apply(event)


def _parse_event_line(line: bytes) -> dict | None:
    line = line.strip()
    if not line:
        return None
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None


def _local_path(run_dir: Path, path: object) -> str | None:
    """An event's file path, mapped into `run_dir` if the folder has moved since."""
    if not path or not isinstance(path, str):
        return None
    candidate = Path(path)
    if candidate.exists():
        return str(candidate)
    for parts in (candidate.parts[-2:], candidate.parts[-1:]):
        moved = run_dir.joinpath(*parts)
        if moved.exists():
            return str(moved)
    return str(candidate)


def _tail(text: str | None, lines: int) -> str | None:
    if not text:
        return text
    return "\n".join(text.rstrip().splitlines()[-lines:])
