"""What a run's score is called, and which metrics hold it: one answer for every label the studio
shows (status line, main chart, Runs table, Evaluate headline).

A built-in game's score is counted in its own unit ("pipes" for Flappy Bird, "food" for Snake,
"steps balanced" for CartPole), declared once on its env class (`VecEnv.score_unit`, read by
`envs.registry.score_unit`). Any other env's score is its episode return, so it is shown once,
as "return", never as a second "score" that repeats it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class GameScore:
    """The score of one environment: its unit, or None when the score is the return."""

    unit: str | None

    @property
    def is_return(self) -> bool:
        return self.unit is None

    @property
    def label(self) -> str:
        """The word after a score: "pipes", or "return"."""
        return self.unit or "return"

    @property
    def key(self) -> str:
        """The metrics field of the per-update mean (trainer/run/events.py EVENT_SCHEMA)."""
        return "episode_return_mean" if self.is_return else "episode_score_mean"

    @property
    def recent_key(self) -> str:
        """The metrics field of the mean over the last 100 episodes."""
        return "recent_return_mean" if self.is_return else "recent_score_mean"

    @property
    def title(self) -> str:
        """A chart title: "Game score (pipes)", or "Episode return"."""
        return "Episode return" if self.is_return else f"Game score ({self.unit})"

    def text(self, value: float | None, digits: int = 1) -> str:
        """ "52.3 pipes", or "return -985.2"; "–" when there is no value yet."""
        if value is None:
            return "–"
        number = format_number(value, digits)
        return f"return {number}" if self.is_return else f"{number} {self.unit}"


@functools.lru_cache(maxsize=256)
def game_score(env_name: str | None) -> GameScore:
    """The GameScore of `env_name` (any spelling the trainer accepts; unknown names: the return)."""
    if not env_name:
        return GameScore(None)
    from envs.registry import score_unit  # imports the game's module (torch): only when asked

    try:
        return GameScore(score_unit(str(env_name)))
    except Exception:  # noqa: BLE001 - a label must never break the page: fall back to the return
        return GameScore(None)


def format_number(value: float | None, digits: int = 1) -> str:
    """1234567 -> '1,234,567', 52.25 -> '52.2' (digits below 1,000); None -> '–'."""
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def format_count(value: int | float | None) -> str:
    """A step count people read at a glance: 2,007,040 -> '2.01M', 20,000,000 -> '20M', 51,200 -> '51.2k'."""
    if value is None:
        return "–"
    value = float(value)
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            scaled = value / size
            text = f"{scaled:.3g}" if scaled < 1000 else f"{scaled:,.0f}"
            return text + suffix
    return f"{value:.0f}"


@functools.lru_cache(maxsize=256)
def game_name(env_name: str | None) -> str:
    """Which game a run plays, whatever the spelling: "CartPole-v1", "cartpole" and "gym:CartPole-v1"
    are all "cartpole"; a Gymnasium id or entry point is itself. Runs of different games are
    charted on separate axes, as their scores do not compare."""
    if not env_name:
        return "?"
    from envs.registry import GYM_PREFIX, builtin_aliases

    name = str(env_name).strip()
    inner = name[len(GYM_PREFIX) :].strip() if name.startswith(GYM_PREFIX) else name
    return builtin_aliases().get(inner.lower(), inner)
