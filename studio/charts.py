"""Plotly figures of training curves and machine usage, as plain plotly-JSON dicts.

Every figure takes one or more `CurveSource`s (a label and that run's `metrics` events), so the
live view (one run) and the Runs tab (several runs overlaid) draw with the same code.

The figures are dicts in plotly's JSON schema (`{"data": [...], "layout": {...}}`) rather than
`plotly.graph_objects.Figure`s: building a validated Figure with subplots costs ~0.1 s of CPU,
a dict costs ~1 ms, and the studio draws these every couple of seconds while a trainer needs
the CPU. `plotly.graph_objects.Figure(figure)` turns one into a Figure (the tests do).
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MAX_POINTS_PER_CURVE = 1500
SMOOTHING_WEIGHT = 0.8
PALETTE = (
    "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c",
    "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d",
)
# (metrics key, subplot title) for the small charts under the reward chart.
DIAGNOSTICS = (
    ("episode_length_mean", "Episode length"),
    ("episode_score_mean", "Game score"),
    ("policy_loss", "Policy loss"),
    ("value_loss", "Value loss"),
    ("entropy", "Entropy"),
    ("approx_kl", "Approx. KL"),
    ("fps", "Steps / s"),
    ("clip_fraction", "Clip fraction"),
)
DIAGNOSTIC_COLUMNS = 4


@dataclass(frozen=True)
class CurveSource:
    """One run's curves: a label for the legend and its `metrics` events."""

    label: str
    metrics: Sequence[dict]


@dataclass(frozen=True)
class UsageSample:
    """One reading of the machine's load, in percent (None where not available)."""

    time: float
    cpu_percent: float
    ram_percent: float
    gpu_percent: float | None = None
    gpu_memory_percent: float | None = None


# ----------------------------------------------------------------------------- data


def smooth(values: Sequence[float], weight: float = SMOOTHING_WEIGHT) -> np.ndarray:
    """Exponential moving average with TensorBoard's bias correction (no lag at the start)."""
    smoothed = np.empty(len(values), dtype=np.float64)
    average, correction = 0.0, 0.0
    for index, value in enumerate(values):
        average = weight * average + (1.0 - weight) * float(value)
        correction = weight * correction + (1.0 - weight)
        smoothed[index] = average / correction
    return smoothed


def metric_series(metrics: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps and values of `key` over the events where both are finite numbers."""
    steps, values = [], []
    for event in metrics:
        step, value = event.get("step"), event.get(key)
        if _is_number(step) and _is_number(value):
            steps.append(float(step))
            values.append(float(value))
    return np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)


def downsample(
    steps: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS_PER_CURVE
) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` evenly spread points, always keeping the last one."""
    if len(steps) <= max_points:
        return steps, values
    index = np.unique(np.linspace(0, len(steps) - 1, max_points).round().astype(int))
    return steps[index], values[index]


# ----------------------------------------------------------------------------- figures


def reward_figure(sources: Sequence[CurveSource], height: int = 340) -> dict:
    """Mean episode return against steps: raw (faint) and smoothed (bold) for each run.

    The first trace is always the first run's raw curve, so a page can count its points.
    """
    data = []
    overlay = len(sources) > 1
    for number, source in enumerate(sources):
        color = PALETTE[number % len(PALETTE)]
        steps, returns = metric_series(source.metrics, "episode_return_mean")
        smoothed = smooth(returns)
        shown_steps, shown_returns = downsample(steps, returns)
        _, shown_smoothed = downsample(steps, smoothed)
        name = source.label if overlay else "return"
        data.append(_line(shown_steps, shown_returns, f"{name} (raw)", color, width=1, opacity=0.35,
                          legendgroup=name, showlegend=not overlay))
        data.append(_line(shown_steps, shown_smoothed, name if overlay else "smoothed", color, width=2.5,
                          legendgroup=name))
    layout = _base_layout(height, title="Episode return")
    layout["xaxis"] = {"title": {"text": "steps"}, "tickformat": "~s"}
    layout["yaxis"] = {"title": {"text": "mean return"}}
    if not any(trace["x"] for trace in data):
        _add_waiting_note(layout, "Waiting for the first finished episode…")
    return {"data": data, "layout": layout}


def diagnostics_figure(sources: Sequence[CurveSource], height: int = 460) -> dict:
    """Small charts of episode length, score, losses, entropy, KL, speed and clip fraction."""
    data = []
    overlay = len(sources) > 1
    for number, source in enumerate(sources):
        color = PALETTE[number % len(PALETTE)]
        for position, (key, _title) in enumerate(DIAGNOSTICS):
            steps, values = downsample(*metric_series(source.metrics, key))
            suffix = "" if position == 0 else str(position + 1)
            data.append(_line(steps, values, source.label, color, width=1.8, legendgroup=source.label,
                              showlegend=overlay and position == 0, xaxis=f"x{suffix}", yaxis=f"y{suffix}"))
    layout = _base_layout(height, margin={"l": 45, "r": 15, "t": 60 if overlay else 40, "b": 35})
    layout.update(copy.deepcopy(_diagnostics_grid()))
    layout["showlegend"] = overlay
    if not any(trace["x"] for trace in data):
        _add_waiting_note(layout, "Waiting for the first update…")
    return {"data": data, "layout": layout}


def system_figure(samples: Sequence[UsageSample], height: int = 260) -> dict:
    """CPU, RAM and (where there is an NVIDIA GPU) GPU load and memory over time, in percent."""
    times = [dt.datetime.fromtimestamp(sample.time).isoformat(sep=" ", timespec="seconds") for sample in samples]
    series = (
        ("CPU", [s.cpu_percent for s in samples], "#2563eb"),
        ("RAM", [s.ram_percent for s in samples], "#16a34a"),
        ("GPU", [s.gpu_percent for s in samples], "#dc2626"),
        ("GPU memory", [s.gpu_memory_percent for s in samples], "#ea580c"),
    )
    data = [
        {"type": "scatter", "mode": "lines", "name": name, "x": times, "y": values,
         "line": {"color": color, "width": 2}}
        for name, values, color in series
        if any(value is not None for value in values)
    ]
    layout = _base_layout(height, title="Machine")
    layout["yaxis"] = {"range": [0, 100], "ticksuffix": " %"}
    layout["xaxis"] = {"type": "date"}
    if not samples:
        _add_waiting_note(layout, "Sampling…")
    return {"data": data, "layout": layout}


# ----------------------------------------------------------------------------- pieces


def _line(x: np.ndarray, y: np.ndarray, name: str, color: str, width: float, **extra) -> dict:
    return {"type": "scatter", "mode": "lines", "name": name, "x": x.tolist(), "y": y.tolist(),
            "line": {"color": color, "width": width}, **extra}


@functools.lru_cache(maxsize=1)
def _template() -> dict:
    import plotly.io as pio

    return pio.templates["plotly_white"].to_plotly_json()


@functools.lru_cache(maxsize=1)
def _diagnostics_grid() -> dict:
    """Axes domains and subplot titles of the 2 x 4 grid (computed once by plotly)."""
    from plotly.subplots import make_subplots

    rows = math.ceil(len(DIAGNOSTICS) / DIAGNOSTIC_COLUMNS)
    grid = make_subplots(rows=rows, cols=DIAGNOSTIC_COLUMNS, subplot_titles=[t for _, t in DIAGNOSTICS],
                         horizontal_spacing=0.07, vertical_spacing=0.2).to_dict()["layout"]
    grid.pop("template", None)
    for annotation in grid.get("annotations", []):
        annotation["font"] = {"size": 13}
    for name in list(grid):
        if name.startswith("xaxis"):
            grid[name]["tickformat"] = "~s"
    return grid


def _base_layout(height: int, title: str | None = None, margin: dict | None = None) -> dict:
    layout = {
        "template": _template(),
        "height": height,
        "margin": margin or {"l": 55, "r": 20, "t": 50, "b": 45},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1},
        "hovermode": "x unified",
        "font": {"size": 12},
        "annotations": [],
    }
    if title:
        layout["title"] = {"text": title, "x": 0.01, "y": 0.97}
    return layout


def _add_waiting_note(layout: dict, text: str) -> None:
    layout.setdefault("annotations", []).append({
        "text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
        "font": {"size": 14, "color": "#6b7280"},
    })


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
