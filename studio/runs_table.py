"""The Runs tab's table as plain values (no gradio): which runs it lists (filtered by game and
status), in which order (the sorts), the note under the filters, and the run pickers' choices.
Tested directly; studio/runs_tab.py shows them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from studio.snapshot import ACTIVE_STATUSES, RunSnapshot

ALL = "all"
ACTIVE = "active"  # the status filter's "starting, running or stopping"
STATUS_FILTERS = (ALL, ACTIVE, "running", "finished", "stopped", "failed", "interrupted")
# The status sort: what needs attention first (training, then broken), finished runs last.
STATUS_ORDER = ("running", "starting", "stopping", "failed", "interrupted", "stopped", "finished")


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
    "status": lambda run: (
        STATUS_ORDER.index(run.status) if run.status in STATUS_ORDER else len(STATUS_ORDER),
        -(run.started_at or 0.0),
        run.run_id,
    ),
}
DEFAULT_SORT = "newest first"


def game_filter_choices(runs: Sequence[RunSnapshot]) -> list[str]:
    """ "all", then every game some run plays, alphabetically."""
    return [ALL] + sorted({run.env_name for run in runs}, key=str.casefold)


def table_runs(
    runs: Sequence[RunSnapshot], game: str | None = ALL, status: str | None = ALL, order: str | None = DEFAULT_SORT
) -> list[RunSnapshot]:
    """The runs the table lists: those of `game` and `status` ("all" for any; status "active" for
    starting, running or stopping), in `order` (a key of SORT_ORDERS)."""
    game, status = game or ALL, status or ALL
    shown = [
        run
        for run in runs
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


def run_choices(runs: Sequence[RunSnapshot]) -> list[tuple[str, str]]:
    """(label, run id) for the run pickers: a named run shows its name beside its id."""
    return [(f"{run.name} ({run.run_id})" if run.name else run.run_id, run.run_id) for run in runs]
