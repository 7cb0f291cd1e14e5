"""Plotly figures of training curves, as plain plotly-JSON dicts (machine usage: studio/system_chart.py).

Every figure takes one or more `CurveSource`s (a label, that run's `metrics` events and its
environment), so the live view (one run) and the Runs tab (several runs overlaid) draw with the
same code. The main chart shows what `ChartOptions` ask for, as TensorBoard and W&B do: the game
score (in the game's unit, studio/score.py), the return or the episode length; EMA smoothing;
a log scale; steps or training time on the x-axis. Runs of different games get one subplot each.
Every trace holds at most a bounded number of points, chosen so that spikes and dips survive
(`downsample`), so a 20M-step run draws as fast as a short one.

The figures are dicts in plotly's JSON schema (`{"data": [...], "layout": {...}}`) rather than
`plotly.graph_objects.Figure`s: building a validated Figure with subplots costs ~0.1 s of CPU,
a dict costs ~1 ms, and the studio draws these every couple of seconds while a trainer needs
the CPU. `plotly.graph_objects.Figure(figure)` turns one into a Figure (the tests do).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from studio.chart_layout import base_layout, line, note, show_lone_points, show_waiting
from studio.score import GameScore, game_name, game_score
from studio.series import SMOOTHING_WEIGHT, downsample, is_number, metric_series, smooth
from trainer.config.metrics import chart_metrics

MAX_POINTS_DIAGNOSTIC = 400  # per trace of the small charts (a few hundred pixels wide)
MAX_SMOOTHING = 0.99
# What the main chart can show ("score", "return", "length"): menu word -> (metrics field, title),
# from the metric registry (trainer/config/metrics.py). The score's field depends on the game.
MAIN_CHART: dict[str, tuple[str, str]] = {
    chart.option: (name, chart.label) for name, chart in chart_metrics("main") if chart.option
}
CHART_METRICS = tuple(MAIN_CHART)
CHART_X_AXES = ("steps", "time")  # time: training seconds (`elapsed`, continuous over resumes)
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d")
# (metrics key, subplot title) of the small charts under the main chart, from the metric registry.
# The episode length is one of them too: the one episode measure every env has.
DIAGNOSTICS = tuple((name, chart.label) for name, chart in chart_metrics("diagnostics"))
DIAGNOSTIC_COLUMNS = 4
WAITING_TEXT = "Waiting for the first update…"


@dataclass(frozen=True)
class CurveSource:
    """One run's curves: a label for the legend, its `metrics` events and its environment."""

    label: str
    metrics: Sequence[dict]
    env_name: str | None = None


@dataclass(frozen=True)
class ChartOptions:
    """What the main chart shows; `reward_figure(sources, **options.kwargs())`."""

    metric: str = "score"
    smoothing: float = SMOOTHING_WEIGHT
    log: bool = False
    x: str = "steps"

    @classmethod
    def from_controls(
        cls, metric: object = None, smoothing: object = None, log: object = None, x: object = None
    ) -> ChartOptions:
        """From the page's controls; a missing or odd value (an old tab, an API call) is the default."""
        default = cls()
        try:
            weight = min(MAX_SMOOTHING, max(0.0, float(smoothing)))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            weight = default.smoothing
        return cls(
            metric=metric if metric in CHART_METRICS else default.metric,
            smoothing=weight if math.isfinite(weight) else default.smoothing,
            log=bool(log) if log is not None else default.log,
            x=x if x in CHART_X_AXES else default.x,
        )

    def kwargs(self) -> dict:
        return {"metric": self.metric, "smoothing": self.smoothing, "log": self.log, "x": self.x}


# ----------------------------------------------------------------------------- figures


def reward_figure(
    sources: Sequence[CurveSource],
    metric: str = "score",
    smoothing: float = SMOOTHING_WEIGHT,
    log: bool = False,
    x: str = "steps",
    height: int = 340,
) -> dict:
    """The main chart: each run's `metric` ("score": the game score in its unit, "return",
    "length") against steps or training time ("steps" / "time"), raw (faint) and EMA-smoothed
    with weight `smoothing` (bold; 0 draws the raw curve alone), on a log y-axis if `log`.

    Runs of different games (studio/score.py game_name) are drawn on separate axes, one
    subplot per game, each labelled in that game's unit: a CartPole curve (hundreds of steps)
    and a Flappy Bird one (tens of pipes) on one axis would flatten one of them.
    The first trace is always the first run's raw curve, so a page can count its points.
    """
    if metric not in CHART_METRICS:
        raise ValueError(f"metric must be one of {', '.join(CHART_METRICS)}, got {metric!r}")
    if x not in CHART_X_AXES:
        raise ValueError(f"x must be one of {', '.join(CHART_X_AXES)}, got {x!r}")
    smoothing = min(MAX_SMOOTHING, max(0.0, float(smoothing)))
    groups: dict[str, list[int]] = {}  # game -> numbers of its sources, in order of appearance
    for number, source in enumerate(sources):
        groups.setdefault(game_name(source.env_name), []).append(number)
    overlay = len(sources) > 1
    x_key, x_scale, x_title = _x_axis(sources, x)
    data: list[dict] = []
    panels = []  # (game, GameScore of its first run, the panel's y values)
    for row, (game, numbers) in enumerate(groups.items(), start=1):
        score = game_score(sources[numbers[0]].env_name)
        axes = {} if row == 1 else {"xaxis": f"x{row}", "yaxis": f"y{row}"}
        panel_values: list[np.ndarray] = []
        for number in numbers:
            source = sources[number]
            color = PALETTE[number % len(PALETTE)]
            key = _metric_key(metric, game_score(source.env_name))
            xs, values = metric_series(source.metrics, key, x_key)
            xs = xs / x_scale
            name = source.label if overlay else _metric_word(metric, score)
            panel_values.append(values)
            shown_x, shown_values = downsample(xs, values)
            if smoothing <= 0:
                data.append(line(shown_x, shown_values, name, color, width=2, legendgroup=name, **axes))
                continue
            smoothed = smooth(values, smoothing)
            panel_values.append(smoothed)
            smooth_x, shown_smoothed = downsample(xs, smoothed)
            data.append(
                line(
                    shown_x,
                    shown_values,
                    f"{name} (raw)",
                    color,
                    width=1,
                    opacity=0.35,
                    legendgroup=name,
                    showlegend=not overlay,
                    **axes,
                )
            )
            data.append(
                line(
                    smooth_x,
                    shown_smoothed,
                    name if overlay else "smoothed",
                    color,
                    width=2.5,
                    legendgroup=name,
                    **axes,
                )
            )
        panels.append((game, score, np.concatenate(panel_values) if panel_values else np.empty(0)))

    if len(panels) == 1:
        title = _metric_title(metric, panels[0][1])
    else:  # several games, or none yet
        title = _metric_title(metric, None) + (" by game" if panels else "")
    layout = base_layout(height if len(panels) <= 1 else max(height, 250 * len(panels)), title=title)
    if not any(trace["x"] for trace in data):
        show_waiting(layout, "Waiting for the first finished episode…")
        return {"data": data, "layout": layout}
    gap = 0.12 if len(panels) > 1 else 0.0
    span = (1.0 - gap * (len(panels) - 1)) / len(panels)
    for row, (game, score, values) in enumerate(panels, start=1):
        suffix = "" if row == 1 else str(row)
        top = 1.0 - (row - 1) * (span + gap)
        y_axis = {"title": {"text": _axis_title(metric, score)}, "domain": [max(0.0, top - span), top]}
        linear_note = ""
        if log and values.size and np.all(values > 0):
            y_axis["type"] = "log"
        elif log:
            linear_note = " · log scale needs values above 0: linear"
        x_axis = {"anchor": f"y{suffix}"}
        if row == len(panels):  # the x-axis title once, under the lowest panel
            x_axis["title"] = {"text": x_title}
        if x == "steps":
            x_axis["tickformat"] = "~s"
        layout[f"xaxis{suffix}"] = x_axis
        layout[f"yaxis{suffix}"] = y_axis
        if len(panels) > 1:
            layout["annotations"].append(
                note(
                    f"<b>{game}</b>: {_metric_title(metric, score).lower()}{linear_note}",
                    x=0.0,
                    y=top,
                    xanchor="left",
                    yanchor="bottom",
                )
            )
        elif linear_note:
            layout["title"]["text"] += f'<span style="font-size:12px;color:#6b7280">{linear_note}</span>'
    if len(panels) > 1:
        layout["margin"] = {"l": 60, "r": 20, "t": 80, "b": 45}
    return show_lone_points({"data": data, "layout": layout})


def diagnostics_figure(sources: Sequence[CurveSource], height: int = 460, x: str = "steps") -> dict:
    """The small charts under the main chart: one per diagnostics chart of the metric registry
    (DIAGNOSTICS) whose metric has at least one value in `sources`, in the registry's order,
    DIAGNOSTIC_COLUMNS a row. So each run shows its algorithm's own: PPO its episode length,
    explained variance, losses, entropy, KL, speed and clip fraction; DQN its Q-values, TD error,
    epsilon and replay buffer; SAC its entropy coefficient; runs of several algorithms overlaid
    (the Runs tab) the union. `height` is that of two rows (a row more or less scales it)."""
    x_key, x_scale, x_title = _x_axis(sources, x if x in CHART_X_AXES else "steps")
    series = [[metric_series(source.metrics, key, x_key) for key, _ in DIAGNOSTICS] for source in sources]
    shown = tuple(position for position in range(len(DIAGNOSTICS)) if any(len(found[position][0]) for found in series))
    overlay = len(sources) > 1
    rows = math.ceil(len(shown) / DIAGNOSTIC_COLUMNS) or 2  # waiting: the usual two rows' room
    margin = {"l": 45, "r": 15, "t": 60 if overlay else 40, "b": 35}
    layout = base_layout(round(height * rows / 2), margin=margin)
    if not shown:
        show_waiting(layout, WAITING_TEXT)
        return {"data": [], "layout": layout}
    data = []
    for number, source in enumerate(sources):
        color = PALETTE[number % len(PALETTE)]
        for panel, position in enumerate(shown):
            xs, values = series[number][position]
            xs, values = downsample(xs / x_scale, values, MAX_POINTS_DIAGNOSTIC)
            suffix = "" if panel == 0 else str(panel + 1)
            data.append(
                line(
                    xs,
                    values,
                    source.label,
                    color,
                    width=1.8,
                    legendgroup=source.label,
                    showlegend=overlay and panel == 0,
                    xaxis=f"x{suffix}",
                    yaxis=f"y{suffix}",
                )
            )
    layout.update(copy.deepcopy(_diagnostics_grid(tuple(DIAGNOSTICS[position][1] for position in shown))))
    if x == "time":
        for name in list(layout):
            if name.startswith("xaxis"):
                layout[name].pop("tickformat", None)
        layout["xaxis"]["title"] = {"text": x_title}  # the first small chart names the unit
    layout["showlegend"] = overlay
    return show_lone_points({"data": data, "layout": layout})


# ----------------------------------------------------------------------------- pieces


@functools.lru_cache(maxsize=32)
def _diagnostics_grid(titles: tuple[str, ...]) -> dict:
    """Axes domains and subplot titles of a grid of small charts with these titles, DIAGNOSTIC_COLUMNS
    a row (computed by plotly once per set of charts: an algorithm's, or a comparison's union)."""
    from plotly.subplots import make_subplots

    rows = math.ceil(len(titles) / DIAGNOSTIC_COLUMNS)
    grid = make_subplots(
        rows=rows,
        cols=DIAGNOSTIC_COLUMNS,
        subplot_titles=list(titles),
        horizontal_spacing=0.07,
        vertical_spacing=0.4 / rows,  # the gap of a 2-row grid (0.2) in pixels, as the height grows by rows
    ).to_dict()["layout"]
    grid.pop("template", None)
    for annotation in grid.get("annotations", []):
        annotation["font"] = {"size": 13}
    for name in list(grid):
        if name.startswith("xaxis"):
            grid[name]["tickformat"] = "~s"
    for cell in range(len(titles) + 1, rows * DIAGNOSTIC_COLUMNS + 1):  # the last row's empty cells: no axes
        grid[f"xaxis{cell}"]["visible"] = grid[f"yaxis{cell}"]["visible"] = False
    return grid


def _x_axis(sources: Sequence[CurveSource], x: str) -> tuple[str, float, str]:
    """(metrics key, divisor, axis title) of the x-axis: steps, or training time in s, min or h."""
    if x == "steps":
        return "step", 1.0, "steps"
    longest = max(
        (
            float(event["elapsed"])
            for source in sources
            for event in source.metrics[-1:]
            if is_number(event.get("elapsed"))
        ),
        default=0.0,
    )
    if longest >= 2 * 3600:
        return "elapsed", 3600.0, "training time (h)"
    if longest >= 2 * 60:
        return "elapsed", 60.0, "training time (min)"
    return "elapsed", 1.0, "training time (s)"


def _metric_key(metric: str, score: GameScore) -> str:
    return score.key if metric == "score" else MAIN_CHART[metric][0]


def _metric_word(metric: str, score: GameScore) -> str:
    """The legend name of a single run's curve: "pipes", "return", "length"."""
    return score.label if metric == "score" else metric


def _metric_title(metric: str, score: GameScore | None) -> str:
    """ "Game score (pipes)", "Episode return", "Episode length"; "Game score" for no game in particular."""
    if metric == "score" and score is not None:
        return score.title
    return MAIN_CHART[metric][1]


def _axis_title(metric: str, score: GameScore) -> str:
    if metric == "score" and not score.is_return:
        return f"{score.unit} per episode"
    return "mean steps per episode" if metric == "length" else "mean return"
