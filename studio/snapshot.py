"""What the page reads of a run: `RunSnapshot`, a consistent read-only copy of a run's state at
one moment (`RunState.snapshot()` in studio/history.py), and the values it holds.

No gradio, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainer.run.status import NOT_OVER_STATUSES as ACTIVE_STATUSES  # the studio's "active": queued too
from trainer.run.status import QUEUED, RESUMABLE_STATUSES, queued_text  # noqa: F401 - RESUMABLE_STATUSES: the studio's names


@dataclass(frozen=True)
class GifInfo:
    path: str
    step: int
    episode_return: float | None
    episode_score: float | None
    steps_shown: int | None = None  # what the GIF shows of its episode (None: a run from before they were
    episode_steps: int | None = None  # recorded); see the gif event in trainer/run/events.py
    episode_ended: bool | None = None
    recorded_at: float | None = None  # time.time() its episode began (the gif event's time less its seconds)


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
    metrics: list[dict]  # downsampled to at most MAX_METRIC_POINTS (+1); metrics.jsonl has them all
    update_count: int
    best_return: float | None
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
    name: str  # "" until a person names the run (notes.json)
    notes: str
    version: int
    queue_place: int | None = None  # a queued run's place in the run queue (1: the next to start)

    @property
    def title(self) -> str:
        """The run's name when it has one, else its id."""
        return self.name or self.run_id

    @property
    def status_text(self) -> str:
        """The status as a person reads it: "queued, 2nd in line" for a queued run, else the status."""
        return queued_text(self.queue_place) if self.status == QUEUED else self.status

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
        return as_float(self.metrics[-1].get("fps")) if self.metrics else None

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
    def last_return(self) -> float | None:
        """Mean return over the most recent episodes (the trainer's last-100 mean when given)."""
        return self.last_value("recent_return_mean", "episode_return_mean")

    def last_value(self, recent_key: str, key: str) -> float | None:
        """The latest `recent_key` (a last-100-episodes mean), else the latest `key` (that update's
        mean): e.g. ("recent_score_mean", "episode_score_mean") for the game score."""
        for metric in reversed(self.metrics):
            value = as_float(metric.get(recent_key))
            if value is None:
                value = as_float(metric.get(key))
            if value is not None:
                return value
        return None


def as_float(value: object) -> float | None:
    """An event's number, or None for anything else (a bool, a string, NaN): event files are data."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value else None  # NaN -> None


def as_int(value: object) -> int | None:
    number = as_float(value)
    return int(number) if number is not None else None


def as_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None
