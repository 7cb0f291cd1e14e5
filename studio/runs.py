"""Training runs as the studio sees them.

`RunManager` starts every run's trainer in its own spawned process, hands it a queue and a
stop event, and keeps one drain thread per run that moves the trainer's events into that
run's `RunState`. Browser sessions only ever read `RunState` (a queue item can be read only
once), so any number of tabs can watch the same run, and closing a tab stops nothing.

Runs that this studio did not start (an earlier studio, the CLI) are read from their run
directory's `metrics.jsonl`, the durable copy of the same events.

This module does not import gradio or torch: it is the part of the studio a spawned trainer
process never needs, and it is tested on its own with a fake trainer.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue as queue_module
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
ACTIVE_STATUSES = ("starting", "running", "stopping")
RESUMABLE_STATUSES = ("stopped", "failed", "interrupted")
LOG_TAIL_LINES = 400
TRACEBACK_TAIL_LINES = 15

TrainerTarget = Callable[[dict, str, Any, Any, bool], None]


class RunError(Exception):
    """A request about runs that cannot be carried out; the message is meant for people."""


class RunLimitError(RunError):
    """Starting one more run would exceed the studio's limit of concurrent runs."""


class UnknownRunError(RunError):
    """No run of that id exists in the runs folder."""


# --------------------------------------------------------------------------- run ids and paths


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is a plain run id; raise RunError otherwise.

    A run id names one folder directly inside the runs folder, so it may only hold
    letters, digits, '.', '_' and '-', and may not be '.' or '..'.
    """
    if not isinstance(run_id, str) or not run_id.strip():
        raise RunError("No run selected: pick a run first.")
    run_id = run_id.strip()
    if not RUN_ID_PATTERN.fullmatch(run_id) or run_id in (".", ".."):
        raise RunError(
            f"{run_id!r} is not a valid run id: run ids only contain letters, digits, "
            "'.', '_' and '-'."
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


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")
    return slug[:40] or "run"


def _write_atomically(path: Path, text: str) -> None:
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as tmp_file:
            tmp_file.write(text)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- run state


@dataclass(frozen=True)
class GifInfo:
    path: str
    step: int
    episode_return: float | None
    episode_score: float | None


@dataclass
class RunState:
    """Everything the studio knows about one run, built from its events.

    Writers (a drain thread, or a reload from metrics.jsonl) call `apply`; readers call
    `snapshot()` and get a consistent copy, so a browser session never sees a half-applied
    event.
    """

    run_id: str
    run_dir: Path
    config: dict = field(default_factory=dict)
    status: str = "starting"
    managed: bool = False  # started by this studio (a process and drain thread belong to it)
    total_timesteps: int | None = None
    step: int = 0
    device: str | None = None
    metrics: list[dict] = field(default_factory=list)
    log_lines: deque = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    log_count: int = 0
    gifs: list[GifInfo] = field(default_factory=list)
    latest_checkpoint: str | None = None
    final_model: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    started_at: float | None = None
    segment_started_at: float | None = None
    finished_segments_seconds: float = 0.0
    last_event_at: float | None = None
    version: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    # ---- writing

    def apply(self, event: dict) -> None:
        """Fold one trainer event (see docs/architecture.md, "Events") into the state."""
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        with self.lock:
            event_time = _as_float(event.get("time")) or time.time()
            handler = _EVENT_HANDLERS.get(kind)
            if handler is not None:
                handler(self, event, event_time)
            self.last_event_at = event_time
            self.version += 1

    def _on_start(self, event: dict, event_time: float) -> None:
        if self.segment_started_at is not None and self.last_event_at is not None:
            self.finished_segments_seconds += max(0.0, self.last_event_at - self.segment_started_at)
        self.segment_started_at = event_time
        if self.started_at is None:
            self.started_at = event_time
        if isinstance(event.get("config"), dict):
            self.config = event["config"]
        self.device = event.get("device") or self.device
        self.total_timesteps = _as_int(event.get("total_timesteps")) or self.total_timesteps
        resumed_from = _as_int(event.get("resumed_from_step"))
        if resumed_from:
            # Curves continue from the checkpoint: drop what the interrupted segment logged
            # after it, so no step appears twice.
            self.metrics = [m for m in self.metrics if (m.get("step") or 0) <= resumed_from]
            self.step = resumed_from
        self.status = "running" if self.status != "stopping" else "stopping"
        self.error_message = self.error_traceback = None

    def _on_metrics(self, event: dict, event_time: float) -> None:
        self.metrics.append(event)
        self.step = _as_int(event.get("step")) or self.step
        if self.status == "starting":
            self.status = "running"

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
                    step=_as_int(event.get("step")) or 0,
                    episode_return=_as_float(event.get("episode_return")),
                    episode_score=_as_float(event.get("episode_score")),
                )
            )

    def _on_model(self, event: dict, event_time: float) -> None:
        self.final_model = _local_path(self.run_dir, event.get("path"))

    def _on_error(self, event: dict, event_time: float) -> None:
        self.error_message = str(event.get("message") or "The trainer failed.")
        self.error_traceback = str(event.get("traceback") or "") or None

    def _on_end(self, event: dict, event_time: float) -> None:
        status = event.get("status")
        self.status = status if status in ("finished", "stopped", "failed") else "failed"
        self.step = _as_int(event.get("step")) or self.step
        final_model = _local_path(self.run_dir, event.get("final_model"))
        self.final_model = final_model or self.final_model

    def mark_process_lost(self, exit_code: int | None) -> None:
        """The trainer process ended without an `end` event (killed, crashed hard)."""
        with self.lock:
            if self.status in ACTIVE_STATUSES:
                self.status = "failed"
                reason = (
                    f"was killed by signal {-exit_code}"
                    if exit_code is not None and exit_code < 0
                    else f"exited with code {exit_code}"
                )
                self.error_message = self.error_message or (
                    f"The trainer process {reason} before the run ended "
                    "(out of memory? killed?). Resume continues from the last checkpoint."
                )
            self.last_event_at = self.last_event_at or time.time()
            self.version += 1

    def set_status(self, status: str) -> None:
        with self.lock:
            self.status = status
            self.version += 1

    # ---- reading

    def snapshot(self) -> "RunSnapshot":
        with self.lock:
            return RunSnapshot(
                run_id=self.run_id,
                run_dir=self.run_dir,
                config=dict(self.config),
                status=self.status,
                managed=self.managed,
                total_timesteps=self.total_timesteps or _as_int(self.config.get("total_timesteps")),
                step=self.step,
                device=self.device,
                metrics=list(self.metrics),
                log_tail=list(self.log_lines),
                log_count=self.log_count,
                latest_gif=self.gifs[-1] if self.gifs else None,
                gif_count=len(self.gifs),
                latest_checkpoint=self.latest_checkpoint or _find_latest_checkpoint(self.run_dir),
                final_model=self.final_model,
                error_message=self.error_message,
                error_traceback=_tail(self.error_traceback, TRACEBACK_TAIL_LINES),
                started_at=self.started_at,
                wall_seconds=self._wall_seconds(),
                version=self.version,
            )

    def _wall_seconds(self) -> float:
        if self.segment_started_at is None:
            return 0.0
        if self.status in ACTIVE_STATUSES:
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


@dataclass(frozen=True)
class RunSnapshot:
    """A consistent, read-only copy of a RunState at one moment."""

    run_id: str
    run_dir: Path
    config: dict
    status: str
    managed: bool
    total_timesteps: int | None
    step: int
    device: str | None
    metrics: list[dict]
    log_tail: list[str]
    log_count: int
    latest_gif: GifInfo | None
    gif_count: int
    latest_checkpoint: str | None
    final_model: str | None
    error_message: str | None
    error_traceback: str | None
    started_at: float | None
    wall_seconds: float
    version: int

    @property
    def env_name(self) -> str:
        return str(self.config.get("env_name") or "?")

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type") or "?")

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def fps(self) -> float | None:
        for metric in reversed(self.metrics[-1:]):
            return _as_float(metric.get("fps"))
        return None

    @property
    def eta_seconds(self) -> float | None:
        fps = self.fps
        if not self.is_active or not fps or not self.total_timesteps:
            return None
        return max(0.0, (self.total_timesteps - self.step) / fps)

    @property
    def progress(self) -> float:
        if not self.total_timesteps:
            return 0.0
        return min(1.0, max(0.0, self.step / self.total_timesteps))

    @property
    def best_return(self) -> float | None:
        returns = [r for r in (_as_float(m.get("episode_return_mean")) for m in self.metrics) if r is not None]
        return max(returns) if returns else None

    @property
    def last_return(self) -> float | None:
        """Mean return over the most recent episodes (the trainer's last-100 mean when given)."""
        for metric in reversed(self.metrics):
            value = _as_float(metric.get("recent_return_mean"))
            if value is None:
                value = _as_float(metric.get("episode_return_mean"))
            if value is not None:
                return value
        return None


# --------------------------------------------------------------------------- reading run folders


class _DiskRun:
    """A run read from its folder; re-reads only the lines metrics.jsonl gained since."""

    def __init__(self, run_id: str, run_dir: Path):
        self._reset(run_id, run_dir)

    def _reset(self, run_id: str, run_dir: Path) -> None:
        self.state = RunState(run_id=run_id, run_dir=run_dir, status="interrupted")
        self.state.config = _read_config(run_dir)
        self._offset = 0
        self._partial = b""
        self._identity: tuple[int, int] | None = None

    def refresh(self) -> RunState:
        metrics_path = self.state.run_dir / "metrics.jsonl"
        try:
            stat = metrics_path.stat()
        except OSError:
            return self._finish_refresh()
        identity = (stat.st_ino, stat.st_dev)
        if identity != self._identity or stat.st_size < self._offset:
            self._reset(self.state.run_id, self.state.run_dir)  # replaced or truncated: reread
            self._identity = identity
        if stat.st_size > self._offset:
            with open(metrics_path, "rb") as metrics_file:
                metrics_file.seek(self._offset)
                data = self._partial + metrics_file.read()
                self._offset = metrics_file.tell()
            *lines, self._partial = data.split(b"\n")
            for line in lines:
                event = _parse_event_line(line)
                if event is not None:
                    self.state.apply(event)
        return self._finish_refresh()

    def _finish_refresh(self) -> RunState:
        state = self.state
        with state.lock:
            if state.status in ("starting", "running", "interrupted"):
                recently_written = (
                    state.last_event_at is not None and time.time() - state.last_event_at < 120
                )
                # A run with no `end` event: still training elsewhere (e.g. the CLI) if its
                # history moved recently, otherwise its process died with no chance to say so.
                state.status = "running" if recently_written and state.metrics else "interrupted"
                if state.status == "interrupted" and not state.error_message:
                    state.error_message = (
                        "This run ended without an end event (the studio or the trainer was "
                        "killed). Resume continues from the last checkpoint."
                    )
            if state.final_model is None:
                state.final_model = _find_final_model(state.run_dir)
        return state


def _parse_event_line(line: bytes) -> dict | None:
    line = line.strip()
    if not line:
        return None
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None


def _read_config(run_dir: Path) -> dict:
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return config if isinstance(config, dict) else {}


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


def _find_latest_checkpoint(run_dir: Path) -> str | None:
    def step_of(path: Path) -> int:
        digits = re.findall(r"\d+", path.stem)
        return int(digits[-1]) if digits else -1

    checkpoints = sorted((run_dir / "checkpoints").glob("*.pth"), key=step_of)
    return str(checkpoints[-1]) if checkpoints else None


def _find_final_model(run_dir: Path) -> str | None:
    finals = sorted(run_dir.glob("*_final.pth"))
    return str(finals[-1]) if finals else None


def _tail(text: str | None, lines: int) -> str | None:
    if not text:
        return text
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value else None  # NaN -> None


def _as_int(value: object) -> int | None:
    number = _as_float(value)
    return int(number) if number is not None else None


# --------------------------------------------------------------------------- the manager


@dataclass
class _ActiveRun:
    state: RunState
    process: Any
    stop_event: Any
    events: Any
    drain_thread: threading.Thread | None = None


def _default_target() -> TrainerTarget:
    from trainer.process import run_training  # the trainer lives in its own layer

    return run_training


class RunManager:
    """Starts, stops, resumes and deletes runs; the one shared state of the studio."""

    def __init__(
        self,
        runs_dir: str | os.PathLike,
        max_concurrent_runs: int = 2,
        target: TrainerTarget | None = None,
        start_method: str = "spawn",
    ):
        if max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs must be at least 1, got {max_concurrent_runs}")
        self.runs_dir = Path(runs_dir).expanduser().resolve()
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.max_concurrent_runs = max_concurrent_runs
        self._target = target
        self._context = multiprocessing.get_context(start_method)
        self._lock = threading.Lock()
        self._active: dict[str, _ActiveRun] = {}
        self._managed: dict[str, RunState] = {}
        self._disk_runs: dict[str, _DiskRun] = {}

    # ---- paths

    def run_dir(self, run_id: str) -> Path:
        """The folder of run `run_id`; RunError if the id is malformed or escapes the runs folder."""
        run_id = validate_run_id(run_id)
        path = self.runs_dir / run_id
        if not is_inside(path, self.runs_dir) or path.resolve() == self.runs_dir:
            raise RunError(f"{run_id!r} does not name a folder inside the runs folder.")
        return path

    def new_run_id(self, config: dict) -> str:
        """`<env>-<model>-<YYYYmmdd-HHMMSS>`, named like the trainer's own run folders."""
        try:
            from trainer.run_dir import env_label

            env = env_label(str(config.get("env_name") or "env"))
        except ImportError:
            env = _slug(str(config.get("env_name") or "env").split(":")[-1])
        model = _slug(str(config.get("model_type") or "model"))
        return f"{env}-{model}-{time.strftime('%Y%m%d-%H%M%S')}"

    # ---- lifecycle

    def start(self, config: dict) -> RunState:
        """Create a run folder for `config` (already validated) and start its trainer."""
        with self._lock:
            self._check_capacity()
            base_id = self.new_run_id(config)
            run_id, run_dir = base_id, self.runs_dir / base_id
            suffix = 1
            while True:
                try:
                    run_dir.mkdir(parents=True)
                    break
                except FileExistsError:
                    suffix += 1
                    run_id = f"{base_id}-{suffix}"
                    run_dir = self.runs_dir / run_id
            _write_atomically(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
            state = RunState(run_id=run_id, run_dir=run_dir, config=dict(config), managed=True)
            state.total_timesteps = _as_int(config.get("total_timesteps"))
            self._launch(state, resume=False)
            return state

    def resume(self, run_id: str) -> RunState:
        """Continue a stopped, failed or interrupted run from its last checkpoint."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            if run_id in self._active:
                raise RunError(f"Run {run_id} is still running; there is nothing to resume.")
            snapshot = self._state_for(run_id, run_dir).snapshot()
            if snapshot.status not in RESUMABLE_STATUSES:
                raise RunError(
                    f"Run {run_id} is {snapshot.status}; only stopped, failed or interrupted "
                    "runs can be resumed. Start a new run to train further."
                )
            if _find_latest_checkpoint(run_dir) is None:
                raise RunError(
                    f"Run {run_id} has no checkpoint to resume from (it ended before its first "
                    "checkpoint). Start a new run instead."
                )
            self._check_capacity()
            config = _read_config(run_dir) or snapshot.config
            state = self._state_for(run_id, run_dir)
            state.managed = True
            state.config = config
            state.set_status("starting")
            self._disk_runs.pop(run_id, None)
            self._managed[run_id] = state
            self._launch(state, resume=True)
            return state

    def stop(self, run_id: str) -> RunState:
        """Ask a run's trainer to stop; it saves a checkpoint and the final model, then ends."""
        run_id = validate_run_id(run_id)
        with self._lock:
            active = self._active.get(run_id)
        if active is None:
            raise RunError(f"Run {run_id} is not running, so there is nothing to stop.")
        active.stop_event.set()
        if active.state.status in ("starting", "running"):
            active.state.set_status("stopping")
        return active.state

    def delete(self, run_id: str) -> None:
        """Delete a run that is not running, folder and all."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            if run_id in self._active:
                raise RunError(f"Run {run_id} is running; stop it before deleting it.")
            if not run_dir.is_dir():
                raise UnknownRunError(f"There is no run {run_id} in {self.runs_dir}.")
            if run_dir.is_symlink():
                run_dir.unlink()
            else:
                shutil.rmtree(run_dir)
            self._managed.pop(run_id, None)
            self._disk_runs.pop(run_id, None)

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop every run (each saves its model), waiting up to `timeout` seconds in all."""
        with self._lock:
            active = list(self._active.values())
        for run in active:
            run.stop_event.set()
        deadline = time.time() + timeout
        for run in active:
            run.process.join(max(0.1, deadline - time.time()))
            if run.process.is_alive():
                run.process.terminate()
                run.process.join(5)
        for run in active:
            if run.drain_thread is not None:
                run.drain_thread.join(5)

    # ---- reading

    def get(self, run_id: str) -> RunSnapshot:
        run_dir = self.run_dir(run_id)
        with self._lock:
            return self._state_for(run_id, run_dir).snapshot()

    def list_runs(self) -> list[RunSnapshot]:
        """Every run in the runs folder, newest first."""
        with self._lock:
            run_ids = set(self._managed)
            try:
                entries = list(os.scandir(self.runs_dir))
            except OSError:
                entries = []
            for entry in entries:
                if entry.is_dir() and RUN_ID_PATTERN.fullmatch(entry.name) and entry.name not in (".", ".."):
                    if (Path(entry.path) / "config.yaml").exists() or (Path(entry.path) / "metrics.jsonl").exists():
                        run_ids.add(entry.name)
            snapshots = []
            for run_id in run_ids:
                run_dir = self.runs_dir / run_id
                if run_id not in self._managed and not run_dir.is_dir():
                    continue
                snapshots.append(self._state_for(run_id, run_dir).snapshot())
        return sorted(snapshots, key=lambda s: (s.started_at or 0.0, s.run_id), reverse=True)

    def active_count(self) -> int:
        with self._lock:
            return len(self._active)

    # ---- internals

    def _state_for(self, run_id: str, run_dir: Path) -> RunState:
        """Caller holds self._lock."""
        if run_id in self._managed:
            return self._managed[run_id]
        if not run_dir.is_dir():
            raise UnknownRunError(f"There is no run {run_id} in {self.runs_dir}.")
        disk_run = self._disk_runs.get(run_id)
        if disk_run is None:
            disk_run = self._disk_runs[run_id] = _DiskRun(run_id, run_dir)
        return disk_run.refresh()

    def _check_capacity(self) -> None:
        """Caller holds self._lock."""
        if len(self._active) >= self.max_concurrent_runs:
            running = ", ".join(sorted(self._active))
            raise RunLimitError(
                f"{len(self._active)} run(s) are already training ({running}) and this studio "
                f"allows {self.max_concurrent_runs} at a time (--max-concurrent-runs). "
                "Stop one or wait for it to finish, then start again."
            )

    def _launch(self, state: RunState, resume: bool) -> None:
        """Caller holds self._lock. Spawns the trainer process and its drain thread."""
        target = self._target or _default_target()
        events = self._context.Queue()
        stop_event = self._context.Event()
        process = self._context.Process(
            target=target,
            args=(dict(state.config), str(state.run_dir), events, stop_event, resume),
            name=f"trainer-{state.run_id}",
        )
        state.managed = True
        self._managed[state.run_id] = state
        process.start()
        active = _ActiveRun(state=state, process=process, stop_event=stop_event, events=events)
        active.drain_thread = threading.Thread(
            target=self._drain, args=(active,), name=f"drain-{state.run_id}", daemon=True
        )
        self._active[state.run_id] = active
        active.drain_thread.start()

    def _drain(self, active: _ActiveRun) -> None:
        """Move one run's events from its queue into its RunState until the run ends."""
        ended = False
        while not ended:
            try:
                event = active.events.get(timeout=0.25)
            except queue_module.Empty:
                if active.process.is_alive():
                    continue
                ended = self._drain_leftovers(active)
                break
            except (EOFError, OSError, ValueError):
                break  # the queue broke with the process (killed mid-write)
            active.state.apply(event)
            ended = isinstance(event, dict) and event.get("type") == "end"
        active.process.join(timeout=60)
        if not ended:
            active.state.mark_process_lost(active.process.exitcode)
        with self._lock:
            self._active.pop(active.state.run_id, None)
        try:
            active.events.close()
        except (OSError, ValueError):
            pass

    @staticmethod
    def _drain_leftovers(active: _ActiveRun) -> bool:
        """After the process died: read what it managed to send. True if that held `end`."""
        while True:
            try:
                event = active.events.get(timeout=0.5)
            except (queue_module.Empty, EOFError, OSError, ValueError):
                return False
            active.state.apply(event)
            if isinstance(event, dict) and event.get("type") == "end":
                return True
