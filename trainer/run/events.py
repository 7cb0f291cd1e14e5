"""Events: every metric, log line, checkpoint, GIF, error and the end of a run is one event, a
JSON-serialisable dict with `type` and `time`, sent to every sink.

The schema is `EVENT_SCHEMA` below, the one declaration of it (the `metrics` event's fields come
from the metric registry, trainer/config/metrics.py): `make_event` refuses an event that lacks a
required field or carries one the table does not name, and tests/test_events.py checks
docs/architecture.md ("Events (the schema the studio reads)") against it.

Sinks: `JsonlSink` (metrics.jsonl), `LogSink` (train.log, the console), `QueueSink` (a live
channel for a caller's own process), `TensorBoardSink` (optional), `ProgressBarSink` (the CLI on a terminal).
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainer.config.metrics import event_fields, tensorboard_tags
from trainer.run.files import atomic_write
from trainer.run.storage import storage_error


@dataclass(frozen=True)
class EventType:
    required: tuple[str, ...]  # always present (a value may be null where the docs say so)
    optional: tuple[str, ...] = ()  # present when the trainer has them

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional


EVENT_SCHEMA: dict[str, EventType] = {
    "start": EventType(
        ("run_id", "config", "device", "total_timesteps", "resumed_from_step"), ("world_size", "num_updates")
    ),
    "metrics": EventType(event_fields("required"), event_fields("optional")),  # trainer/config/metrics.py
    "log": EventType(("level", "message")),
    "checkpoint": EventType(("step", "path")),
    "gif": EventType(
        ("step", "path", "episode_return", "episode_score", "frames"),
        ("seconds", "steps_shown", "episode_steps", "episode_ended"),
    ),
    "model": EventType(("step", "path")),
    "error": EventType(("message", "traceback")),
    "end": EventType(("status", "step", "final_model")),
}


def make_event(kind: str, **fields: Any) -> dict:
    """An event of type `kind`, checked against EVENT_SCHEMA (a mismatch is a bug, not user input)."""
    schema = EVENT_SCHEMA.get(kind)
    if schema is None:
        raise KeyError(
            f"unknown event type {kind!r}; the types are {', '.join(EVENT_SCHEMA)} "
            f"(add a new one to EVENT_SCHEMA in trainer/run/events.py and to docs/architecture.md)"
        )
    missing = [name for name in schema.required if name not in fields]
    unknown = [name for name in fields if name not in schema.fields]
    if missing or unknown:
        raise KeyError(
            f"{kind} event: "
            + "; ".join(
                ([f"missing {missing}"] if missing else [])
                + ([f"fields not in the schema {unknown}"] if unknown else [])
            )
            + " (EVENT_SCHEMA in trainer/run/events.py declares them, a metrics event's in trainer/config/metrics.py; "
            "docs/architecture.md shows the same table)"
        )
    return {"type": kind, "time": time.time(), **{key: _json_safe(value) for key, value in fields.items()}}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


class EventSink(Protocol):
    def __call__(self, event: dict) -> None: ...
    def close(self) -> None: ...


class EventBus:
    """Sends each event to every sink. A sink that fails (a closed queue, the TensorBoard
    writer) is dropped with a warning to the others; an `essential` sink (metrics.jsonl, the
    durable history) that fails stops the run: its error is raised to the caller."""

    def __init__(self, sinks: list[EventSink] | None = None):
        self.sinks: list[EventSink] = list(sinks or [])
        self.broken: list[EventSink] = []  # essential sinks that failed: tried once more at the end

    def emit(self, kind: str, **fields: Any) -> dict:
        event = make_event(kind, **fields)
        self.send(event)
        return event

    def send(self, event: dict) -> None:
        for sink in list(self.sinks):
            try:
                sink(event)
            except Exception as error:  # noqa: BLE001 - one broken sink must not end the run
                self.sinks.remove(sink)
                if getattr(sink, "essential", False):
                    self.broken.append(sink)
                    raise
                self.emit(
                    "log",
                    level="warning",
                    message=f"event sink {type(sink).__name__} failed and was "
                    f"detached: {type(error).__name__}: {error}",
                )

    def emit_last(self, kind: str, **fields: Any) -> dict:
        """The error / end event of a failed run: to every sink, broken essential ones too (a full
        disk may have room for one more line), never raising."""
        event = make_event(kind, **fields)
        for sink in self.sinks + self.broken:
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - the run is ending with an error already
                pass
        return event

    def log(self, message: str, level: str = "info") -> None:
        self.emit("log", level=level, message=message)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:  # noqa: BLE001
                pass


# ---------------------------------------------------------------------------------------------
# Sinks


class JsonlSink:
    """Appends every event as one JSON line to `metrics.jsonl`, the durable history.

    The file is opened per event (a few microseconds, at most a few times a second): every line
    is on disk when the call returns, and a rewrite of the file by `trim_events_after` (resume)
    is never undone by a stale handle. A write that fails (full disk) is cut back to the last
    whole line and raised as StorageError: the file never ends in half a line, and the run stops."""

    essential = True

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, event: dict) -> None:
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise storage_error(self.path, error) from None
        try:
            end = os.lseek(descriptor, 0, os.SEEK_END)
            try:
                written = os.write(descriptor, data)
                if written != len(data):  # a short write is how a full disk shows itself to os.write
                    raise OSError(errno.ENOSPC, "short write")
            except OSError as error:
                try:
                    os.ftruncate(descriptor, end)
                except OSError:
                    pass
                raise storage_error(self.path, error, needed=len(data)) from None
        finally:
            os.close(descriptor)

    def close(self) -> None:
        pass


def read_events(path: str | Path) -> list[dict]:
    """Every event of a metrics.jsonl (a torn last line, from a killed process, is skipped)."""
    events = []
    path = Path(path)
    if not path.exists():
        return events
    with open(path, encoding="utf-8") as file:
        for line in file:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def trim_events_after(path: str | Path, step: int) -> int:
    """Drop `metrics`, `checkpoint`, `gif` and `model` events past `step` from a metrics.jsonl
    (a resumed run repeats those steps, and curves must not hold them twice). Atomic rewrite;
    returns how many events were dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    events = read_events(path)
    kept = [
        event
        for event in events
        if not (event.get("type") in ("metrics", "checkpoint", "gif", "model") and (event.get("step") or 0) > step)
    ]
    atomic_write(path, "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in kept))
    return len(events) - len(kept)


def format_number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}"


def clip_caption(
    steps_shown: int | None,
    episode_steps: int | None,
    episode_ended: bool | None,
    episode_return: float | None,
    episode_score: float | None,
    score_unit: str | None = None,
) -> str:
    """What a GIF shows of its episode, said honestly: the whole episode, the first part of one
    that ended later (with that episode's score and return), or the first part of one still
    running when playing stopped (with what it had reached). The one wording for rollout GIFs
    (studio/views.py, the log line below), Evaluate GIFs (studio/evaluate.py) and
    `python -m trainer evaluate --gif`; here, beside the gif event, so the studio needs no torch.
    score_unit: the game's ("pipes"; else "score 31"); pass episode_score None where the score
    is the return (Gymnasium envs). A GIF event from before these fields existed (steps_shown
    None) gets score and return only."""
    so_far = ""
    if steps_shown is None or episode_steps is None:
        facts = []
    elif episode_ended and steps_shown >= episode_steps:
        facts = [f"whole episode, {episode_steps:,} steps"]
    elif episode_ended:
        facts = [f"first {steps_shown:,} of {episode_steps:,} steps"]
    else:
        after = f" after {episode_steps:,}" if episode_steps > steps_shown else ""
        facts = [f"first {steps_shown:,} steps of an episode still running{after}"]
        so_far = " so far"
    if episode_score is not None:
        facts.append((f"{episode_score:,.0f} {score_unit}" if score_unit else f"score {episode_score:,.0f}") + so_far)
    if episode_return is not None:
        facts.append(f"return {episode_return:,.1f}{so_far}")
    return " · ".join(facts)


def format_event(event: dict, log_interval: int = 1) -> str | None:
    """The human log line for an event (None: nothing to print for it)."""
    kind = event["type"]
    if kind == "metrics":
        if event["update"] % log_interval and not event.get("final_update"):
            return None
        return (
            f"[STEP {event['step']}] EpLenMean: {format_number(event.get('recent_length_mean'))}, "
            f"EpRewMean: {format_number(event['recent_return_mean'], 2)}, "
            f"EpScoreMean: {format_number(event.get('recent_score_mean'), 2)}, "
            f"FPS: {event['fps']:.0f}"
        )
    if kind == "log":
        prefix = "" if event["level"] == "info" else event["level"].upper() + ": "
        return prefix + event["message"]
    if kind == "start":
        resumed = f", resumed from step {event['resumed_from_step']}" if event["resumed_from_step"] is not None else ""
        config = event["config"]
        return (
            f"Run {event['run_id']}: {config['algo']} {config['model_type']} on {config['env_name']} "
            f"x {config['num_envs']} envs, device {event['device']}, "
            f"{event['total_timesteps']:,} steps{resumed}"
        )
    if kind == "checkpoint":
        return f"Checkpoint at step {event['step']}: {event['path']}"
    if kind == "gif":
        caption = clip_caption(
            event.get("steps_shown"),
            event.get("episode_steps"),
            event.get("episode_ended"),
            event["episode_return"],
            event["episode_score"],
        )
        return f"Rollout GIF at step {event['step']} ({event['frames']} frames): {caption}: {event['path']}"
    if kind == "model":
        return f"Final model: {event['path']}"
    if kind == "error":
        return f"ERROR: {event['message']}\n{event['traceback']}".rstrip()
    if kind == "end":
        return f"Run {event['status']} at step {event['step']}."
    return None


class LogSink:
    """Writes log lines: to `train.log` (with a timestamp) or to a stream such as stdout."""

    def __init__(
        self,
        path: str | Path | None = None,
        stream=None,
        log_interval: int = 1,
        timestamps: bool | None = None,
        write: Callable[[str], None] | None = None,
    ):
        self.log_interval = log_interval
        self._file = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")
        self._stream = stream
        self._write = write
        self.timestamps = (path is not None) if timestamps is None else timestamps

    def __call__(self, event: dict) -> None:
        line = format_event(event, self.log_interval)
        if line is None:
            return
        if self.timestamps:
            line = time.strftime("%Y-%m-%d %H:%M:%S ", time.localtime(event["time"])) + line
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        if self._write is not None:
            self._write(line)
        elif self._stream is not None:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class QueueSink:
    """Puts every event on a (multiprocessing) queue: the studio's live channel."""

    def __init__(self, queue):
        self.queue = queue
        self.saw_end = False

    def __call__(self, event: dict) -> None:
        self.queue.put(event)
        if event["type"] == "end":
            self.saw_end = True

    def close(self) -> None:
        pass


class TensorBoardSink:
    """Scalars under `<run_dir>/tensorboard` so that `tensorboard --logdir runs` works."""

    TAGS: dict[str, str] = tensorboard_tags()  # metrics field -> tag, from trainer/config/metrics.py
    SCALARS = tuple(TAGS)

    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        self.writer = SummaryWriter(str(log_dir))

    def __call__(self, event: dict) -> None:
        if event["type"] != "metrics":
            return
        for name, tag in self.TAGS.items():
            value = event.get(name)
            if value is not None:
                self.writer.add_scalar(tag, value, event["step"])

    def close(self) -> None:
        self.writer.close()


class ProgressBarSink:
    """A tqdm bar (steps, FPS, mean return, ETA) for a terminal; log lines print above it."""

    def __init__(self, total: int, log_interval: int = 1, stream=None):
        from tqdm import tqdm

        self._tqdm = tqdm
        self.bar = tqdm(total=total, unit="step", unit_scale=True, dynamic_ncols=True, file=stream or sys.stdout)
        self.lines = LogSink(log_interval=log_interval, write=lambda line: tqdm.write(line, file=stream or sys.stdout))

    def __call__(self, event: dict) -> None:
        if event["type"] == "start":
            self.bar.total = event["total_timesteps"]  # rounded up to whole updates
            if event["resumed_from_step"]:
                self.bar.update(event["resumed_from_step"] - self.bar.n)
            self.bar.refresh()
        if event["type"] == "metrics":
            self.bar.update(max(0, event["step"] - self.bar.n))
            postfix = {}
            if event["recent_return_mean"] is not None:
                postfix["return"] = f"{event['recent_return_mean']:.1f}"
            if event.get("recent_score_mean") is not None and event["recent_score_mean"] != event["recent_return_mean"]:
                postfix["score"] = f"{event['recent_score_mean']:.1f}"
            self.bar.set_postfix(postfix, refresh=False)
        self.lines(event)

    def close(self) -> None:
        self.bar.close()
