"""The run's warnings in the studio: a banner on the run and a line in its log when the recent
mean return has fallen for `warn_falling_updates` consecutive updates, or a loss is not finite.

The same conditions as the alerts in deploy/prometheus/alerts.yml (RLStudioReturnFalling,
RLStudioLossNotFinite), from the same definitions (trainer/serving/metrics_export.py). Everything is a
pure function of the run's metrics history, so a warning is shown once per episode of trouble
(the update it began at), whatever the number of polls or open tabs. Long runs' histories are
downsampled (studio/history.py): there a streak counts the kept points.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from studio.history import RunSnapshot
from trainer.serving.metrics_export import DEFAULT_FALLING_UPDATES, falling_streaks, nonfinite_losses

STEP_IN_LINE = re.compile(r"\[STEP (\d+)\]")


@dataclass(frozen=True)
class Trouble:
    kind: str  # "return_falling" or "loss_not_finite"
    step: int  # the update at which this episode of trouble began
    message: str
    ongoing: bool  # still true at the latest update


def threshold(run: RunSnapshot) -> int:
    try:
        return max(2, int(run.config.get("warn_falling_updates") or DEFAULT_FALLING_UPDATES))
    except (TypeError, ValueError):
        return DEFAULT_FALLING_UPDATES


def troubles(run: RunSnapshot) -> list[Trouble]:
    """Every episode of trouble in the run's history, oldest first."""
    points = run.metrics
    if not points:
        return []
    needed = threshold(run)
    found: list[Trouble] = []
    streaks = falling_streaks(point.get("recent_return_mean") for point in points)
    bad = []
    for point, streak in zip(points, streaks):
        step = int(point.get("step") or 0)
        if streak == needed:
            found.append(
                Trouble(
                    "return_falling",
                    step,
                    f"the mean return has fallen for {needed} consecutive "
                    f"updates (now {_number(point.get('recent_return_mean'))})",
                    False,
                )
            )
        bad_before, bad = bad, nonfinite_losses(point)
        if bad and not bad_before:
            found.append(
                Trouble(
                    "loss_not_finite",
                    step,
                    f"{', '.join(bad)} not finite (NaN or infinite): the "
                    f"update diverged; lower learning_rate, then resume from a checkpoint",
                    False,
                )
            )
    # Only the latest episode of each kind can still be going on.
    ongoing = {"return_falling": streaks[-1] >= needed, "loss_not_finite": bool(bad)}
    latest = {trouble.kind: index for index, trouble in enumerate(found)}
    return [
        Trouble(t.kind, t.step, t.message, ongoing[t.kind] and latest[t.kind] == index) for index, t in enumerate(found)
    ]


def _number(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "–"


def warning_banner(run: RunSnapshot) -> str:
    """HTML for the run's status box: one line per trouble that holds at the latest update."""
    current = [trouble for trouble in troubles(run) if trouble.ongoing]
    return "".join(
        f'<div class="run-warning" style="background:#fff4e5;border-left:4px solid #f59e0b;'
        f'padding:4px 8px;margin-top:6px">⚠ since step {trouble.step:,}: {html.escape(trouble.message)}'
        f"</div>"
        for trouble in current
    )


def log_with_warnings(lines: Sequence[str], run: RunSnapshot) -> list[str]:
    """The log's lines with one `[STEP n] warning: ...` line per episode of trouble, after the
    last line of that step or before; episodes older than the shown lines are left out."""
    warnings = [(trouble.step, f"[STEP {trouble.step}] warning: {trouble.message}") for trouble in troubles(run)]
    if not warnings:
        return list(lines)
    steps, current = [], None
    for line in lines:
        match = STEP_IN_LINE.search(line)
        current = int(match.group(1)) if match else current
        steps.append(current)
    first_step = next((step for step in steps if step is not None), None)
    merged: list[str] = []
    pending = [item for item in warnings if first_step is None or item[0] >= first_step]
    for line, step in zip(lines, steps):
        while pending and step is not None and pending[0][0] < step:
            merged.append(pending.pop(0)[1])
        merged.append(line)
    merged += [text for _, text in pending]
    return merged
