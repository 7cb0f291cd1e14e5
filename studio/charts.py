"""Plotly figures of training curves and machine usage.

Every figure takes one or more `CurveSource`s (a label and that run's `metrics` events), so the
live view (one run) and the Runs tab (several runs overlaid) draw with the same code.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

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
_LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=55, r=20, t=50, b=45),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
    hovermode="x unified",
    font=dict(size=12),
)


@dataclass(frozen=True)
class CurveSource:
    """One run's curves: a label for the legend and its `metrics` events."""

    label: str
    metrics: Sequence[dict]


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
    """Steps and values of `key` over the events where both are numbers."""
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


def reward_figure(sources: Sequence[CurveSource], height: int = 340) -> go.Figure:
    """Mean episode return against steps: raw (faint) and smoothed (bold) for each run.

    The first trace is always the first run's raw curve, so a page can count its points.
    """
    figure = go.Figure()
    overlay = len(sources) > 1
    for number, source in enumerate(sources):
        color = PALETTE[number % len(PALETTE)]
        steps, returns = metric_series(source.metrics, "episode_return_mean")
        smoothed = smooth(returns)
        steps, returns_shown = downsample(steps, returns)
        _, smoothed_shown = downsample(np.arange(len(smoothed)), smoothed)
        name = source.label if overlay else "return"
        figure.add_trace(
            go.Scatter(
                x=steps, y=returns_shown, mode="lines", name=f"{name} (raw)",
                line=dict(color=color, width=1), opacity=0.35, legendgroup=name,
                showlegend=not overlay,
            )
        )
        figure.add_trace(
            go.Scatter(
                x=steps, y=smoothed_shown, mode="lines", name=name if overlay else "smoothed",
                line=dict(color=color, width=2.5), legendgroup=name,
            )
        )
    figure.update_layout(
        title=dict(text="Episode return", x=0.01, y=0.97), height=height,
        xaxis_title="steps", yaxis_title="mean return", **_LAYOUT,
    )
    if not any(len(trace.x) for trace in figure.data):
        _add_waiting_note(figure, "Waiting for the first finished episode…")
    return figure


def diagnostics_figure(sources: Sequence[CurveSource], height: int = 460) -> go.Figure:
    """Small charts of episode length, score, losses, entropy, KL, speed and clip fraction."""
    columns = 4
    rows = (len(DIAGNOSTICS) + columns - 1) // columns
    figure = make_subplots(
        rows=rows, cols=columns, subplot_titles=[title for _, title in DIAGNOSTICS],
        horizontal_spacing=0.07, vertical_spacing=0.2,
    )
    overlay = len(sources) > 1
    for number, source in enumerate(sources):
        color = PALETTE[number % len(PALETTE)]
        for position, (key, _title) in enumerate(DIAGNOSTICS):
            steps, values = downsample(*metric_series(source.metrics, key))
            figure.add_trace(
                go.Scatter(
                    x=steps, y=values, mode="lines", name=source.label,
                    line=dict(color=color, width=1.8), legendgroup=source.label,
                    showlegend=overlay and position == 0,
                ),
                row=position // columns + 1, col=position % columns + 1,
            )
    layout = dict(_LAYOUT, margin=dict(l=45, r=15, t=60 if overlay else 40, b=35))
    figure.update_layout(height=height, showlegend=overlay, **layout)
    figure.update_annotations(font_size=13)
    figure.update_xaxes(tickformat="~s")
    if not any(len(trace.x) for trace in figure.data):
        _add_waiting_note(figure, "Waiting for the first update…")
    return figure


@dataclass(frozen=True)
class UsageSample:
    """One reading of the machine's load, in percent (None where not available)."""

    time: float
    cpu_percent: float
    ram_percent: float
    gpu_percent: float | None = None
    gpu_memory_percent: float | None = None


def system_figure(samples: Sequence[UsageSample], height: int = 260) -> go.Figure:
    """CPU, RAM and (where there is an NVIDIA GPU) GPU load and memory over time, in percent."""
    figure = go.Figure()
    times = [dt.datetime.fromtimestamp(sample.time) for sample in samples]
    series = (
        ("CPU", [s.cpu_percent for s in samples], "#2563eb"),
        ("RAM", [s.ram_percent for s in samples], "#16a34a"),
        ("GPU", [s.gpu_percent for s in samples], "#dc2626"),
        ("GPU memory", [s.gpu_memory_percent for s in samples], "#ea580c"),
    )
    for name, values, color in series:
        if not any(value is not None for value in values):
            continue
        figure.add_trace(
            go.Scatter(x=times, y=values, mode="lines", name=name, line=dict(color=color, width=2))
        )
    figure.update_layout(
        title=dict(text="Machine", x=0.01, y=0.95), height=height,
        yaxis=dict(range=[0, 100], ticksuffix=" %"), **_LAYOUT,
    )
    if not samples:
        _add_waiting_note(figure, "Sampling…")
    return figure


def _add_waiting_note(figure: go.Figure, text: str) -> None:
    figure.add_annotation(
        text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
        font=dict(size=14, color="#6b7280"),
    )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
