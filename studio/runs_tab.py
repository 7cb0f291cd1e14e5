"""What the Runs tab shows besides one run's view, as plain values: which runs the table lists
(filtered by game and status, sorted), the config keys in which compared runs differ, and the
warning when compared runs play different games.

Pure functions of `RunSnapshot`s (no gradio), tested directly; studio/callbacks.py turns them
into component updates.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping, Sequence

from studio.history import ACTIVE_STATUSES, RunSnapshot

ALL = "all"
ACTIVE = "active"  # the status filter's "starting, running or stopping"
STATUS_FILTERS = (ALL, ACTIVE, "running", "finished", "stopped", "failed", "interrupted")
ABSENT = "(not set)"  # shown for a key one compared config has and another lacks
_ABSENT = object()
# The status sort: what needs attention first (training, then broken), finished runs last.
STATUS_ORDER = ("running", "starting", "stopping", "failed", "interrupted", "stopped", "finished")
MAX_DIFF_VALUE_CHARS = 120


def _missing_last(value: float | None) -> tuple[bool, float]:
    """Sort key for a number that may be missing: missing ones after every number (descending)."""
    return (value is None or not math.isfinite(value), -(value or 0.0))


# label -> sort key; each key sorts ascending, so "newest first" negates the start time
SORT_ORDERS: dict[str, Callable[[RunSnapshot], Any]] = {
    "newest first": lambda run: (-(run.started_at or 0.0), run.run_id),
    "oldest first": lambda run: (run.started_at or math.inf, run.run_id),
    "best return": lambda run: (_missing_last(run.best_return), run.run_id),
    "last return": lambda run: (_missing_last(run.last_return), run.run_id),
    "most steps": lambda run: (-run.step, run.run_id),
    "name": lambda run: (not run.name, run.title.casefold(), run.run_id),
    "game": lambda run: (run.env_name.casefold(), -(run.started_at or 0.0), run.run_id),
    "status": lambda run: (STATUS_ORDER.index(run.status) if run.status in STATUS_ORDER else len(STATUS_ORDER),
                           -(run.started_at or 0.0), run.run_id),
}
DEFAULT_SORT = "newest first"


def game_filter_choices(runs: Sequence[RunSnapshot]) -> list[str]:
    """"all", then every game some run plays, alphabetically."""
    return [ALL] + sorted({run.env_name for run in runs}, key=str.casefold)


def table_runs(runs: Sequence[RunSnapshot], game: str | None = ALL, status: str | None = ALL,
               order: str | None = DEFAULT_SORT) -> list[RunSnapshot]:
    """The runs the table lists: those of `game` and `status` ("all" for any; status "active" for
    starting, running or stopping), in `order` (a key of SORT_ORDERS)."""
    game, status = game or ALL, status or ALL
    shown = [
        run for run in runs
        if (game == ALL or run.env_name == game)
        and (status == ALL or run.status == status or (status == ACTIVE and run.status in ACTIVE_STATUSES))
    ]
    return sorted(shown, key=SORT_ORDERS.get(order or DEFAULT_SORT, SORT_ORDERS[DEFAULT_SORT]))


def filter_note(shown: int, total: int) -> str:
    """Under the filters: how many runs the table lists of how many there are."""
    if total == 0:
        return "No runs yet: start one on the Train tab (or with `python -m trainer`), then Refresh."
    if shown == total:
        return f"{total} run(s)."
    return f"Showing {shown} of {total} runs (the filters hide {total - shown})."


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys: {"checkpoint": {"keep": 3}} -> {"checkpoint.keep": 3}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, name + "."))
        else:
            flat[name] = value
    return flat


def config_diff(runs: Sequence[RunSnapshot]) -> tuple[list[str], list[list[str]]]:
    """Headers (key, then each run's title) and one row per config key whose value is not the
    same in every run (a key some configs lack counts as different). No rows for fewer than two
    runs or identical configs."""
    headers = ["key"] + [run.title for run in runs]
    if len(runs) < 2:
        return headers, []
    flats = [flatten_config(run.config) for run in runs]
    keys = sorted(set().union(*flats))
    rows = []
    for key in keys:
        values = [flat.get(key, _ABSENT) for flat in flats]
        if any(value != values[0] for value in values[1:]):
            rows.append([key] + [_shown(value) for value in values])
    return headers, rows


def _shown(value: Any) -> str:
    """A config value as YAML users write it (true, null, [64, 64]), cut to MAX_DIFF_VALUE_CHARS."""
    if value is _ABSENT:
        return ABSENT
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_DIFF_VALUE_CHARS else text[:MAX_DIFF_VALUE_CHARS - 1] + "…"


def compare_note(runs: Sequence[RunSnapshot], diff_rows: int) -> str:
    """Above the config diff: which runs are compared, a warning when they play different games
    (their returns are on different scales), and how many settings differ."""
    if len(runs) < 2:
        return "Tick two or more runs to overlay their curves and see where their configs differ."
    games = sorted({run.env_name for run in runs}, key=str.casefold)
    parts = []
    if len(games) > 1:
        parts.append(f"**Warning: these runs play different games ({', '.join(games)}).** Their returns are "
                     "on different scales and do not compare; each game's curves get their own axes.")
    if diff_rows:
        parts.append(f"{diff_rows} setting(s) differ between the {len(runs)} compared runs:")
    else:
        parts.append(f"The {len(runs)} compared runs have the same config.")
    return "\n\n".join(parts)


def delete_refusal(run: RunSnapshot) -> str | None:
    """Why Delete may not even ask for a confirmation, or None: a run that still trains (the
    manager would refuse the delete after the click)."""
    if run.is_active:
        label = f"{run.name} ({run.run_id})" if run.name else f"Run {run.run_id}"
        return (f"**{label} is {run.status}: stop it first** (the *Stop* button, which saves its model), "
                "then delete it.")
    return None
