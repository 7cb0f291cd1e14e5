"""The numbers behind a curve: a metric's series from the `metrics` events, TensorBoard's EMA
smoothing, and min/max downsampling that keeps spikes (studio/charts.py draws them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SMOOTHING_WEIGHT = 0.8
MAX_POINTS_PER_CURVE = 1500  # per trace of the main chart


def smooth(values: Sequence[float], weight: float = SMOOTHING_WEIGHT) -> np.ndarray:
    """Exponential moving average with TensorBoard's bias correction (no lag at the start);
    weight 0 returns the values, 0.99 is very smooth."""
    smoothed = np.empty(len(values), dtype=np.float64)
    average, correction = 0.0, 0.0
    for index, value in enumerate(values):
        average = weight * average + (1.0 - weight) * float(value)
        correction = weight * correction + (1.0 - weight)
        smoothed[index] = average / correction
    return smoothed


def metric_series(metrics: Sequence[dict], key: str, x_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """x (`x_key`: step or elapsed) and values of `key` over the events where both are finite numbers."""
    xs, values = column(metrics, x_key), column(metrics, key)
    finite = np.isfinite(xs) & np.isfinite(values)
    return xs[finite], values[finite]


def downsample(
    steps: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS_PER_CURVE
) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points that look like all of them: the first and the last, and in each
    of (max_points - 2) / 2 equal runs of points between them the lowest and the highest, in
    order (a min/max envelope). A spike or a collapse is never thinned away, as it would be by
    taking every n-th point. Values must be finite (metric_series gives such)."""
    count = len(steps)
    if count <= max_points:
        return steps, values
    buckets = max(1, (max_points - 2) // 2)
    inner = np.arange(1, count - 1)
    bucket = inner * buckets // (count - 1)  # equal runs of consecutive points, 0 .. buckets - 1
    order = np.lexsort((values[inner], bucket))  # by bucket, then by value
    ordered = bucket[order]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # each bucket's lowest ...
    last = np.r_[first[1:] - 1, len(order) - 1]  # ... and highest
    keep = np.unique(np.concatenate(([0, count - 1], inner[order[first]], inner[order[last]])))
    return steps[keep], values[keep]


def column(metrics: Sequence[dict], key: str) -> np.ndarray:
    """`key` of every event as float64; NaN where it is missing, null or not a number."""
    column = [event.get(key) for event in metrics]
    try:
        return np.array(column, dtype=np.float64)  # None -> NaN
    except (TypeError, ValueError):  # a string in a hand-edited metrics.jsonl
        return np.array([value if is_number(value) else np.nan for value in column], dtype=np.float64)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
