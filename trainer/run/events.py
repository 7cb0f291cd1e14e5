"""Events: every metric, log line, checkpoint, GIF, error and the end of a run is one event, a
JSON-serialisable dict with `type` and `time`, sent to every sink.

The schema is `EVENT_SCHEMA` below, the one declaration of it (the `metrics` event's fields come
from the metric registry, trainer/config/metrics.py): `make_event` refuses an event that lacks a
required field or carries one the table does not name, and tests/test_events.py checks
docs/architecture.md ("Events (the schema the studio reads)") against it.

Here: the schema, `make_event`, `EventBus` (sends each event to every sink), reading and trimming a
metrics.jsonl, and an event's human wording (`format_event`, `clip_caption`). The sinks themselves
live in trainer/run/sinks.py.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainer.config.metrics import event_fields
from trainer.run.files import atomic_write


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
