"""Compared runs (the Runs tab's ticked ones), as plain values: the config keys in which they
differ, and the note above that diff (a warning when they play different games).

Pure functions of `RunSnapshot`s (no gradio), tested directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from studio.snapshot import RunSnapshot

ABSENT = "(not set)"  # shown for a key one compared config has and another lacks
_ABSENT = object()
MAX_DIFF_VALUE_CHARS = 120


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
    return text if len(text) <= MAX_DIFF_VALUE_CHARS else text[: MAX_DIFF_VALUE_CHARS - 1] + "…"


def compare_note(runs: Sequence[RunSnapshot], diff_rows: int) -> str:
    """Above the config diff: which runs are compared, a warning when they play different games
    (their returns are on different scales), and how many settings differ."""
    if len(runs) < 2:
        return "Tick two or more runs to overlay their curves and see where their configs differ."
    games = sorted({run.env_name for run in runs}, key=str.casefold)
    parts = []
    if len(games) > 1:
        parts.append(
            f"**Warning: these runs play different games ({', '.join(games)}).** Their returns are "
            "on different scales and do not compare; each game's curves get their own axes."
        )
    if diff_rows:
        parts.append(f"{diff_rows} setting(s) differ between the {len(runs)} compared runs:")
    else:
        parts.append(f"The {len(runs)} compared runs have the same config.")
    return "\n\n".join(parts)
