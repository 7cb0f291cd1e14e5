"""The machine-usage chart: CPU, RAM and GPU load over time (samples from studio/system.py), as a
plotly-JSON dict; a gap in the sampling breaks the lines.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from studio.chart_layout import base_layout, show_waiting

# Machine samples further apart than this many times their usual spacing are a gap (nobody was
# looking): the lines break there instead of drawing a straight line across.
GAP_FACTOR = 3.0


@dataclass(frozen=True)
class UsageSample:
    """One reading of the machine's load, in percent (None where not available)."""

    time: float
    cpu_percent: float
    ram_percent: float
    gpu_percent: float | None = None
    gpu_memory_percent: float | None = None


def system_figure(samples: Sequence[UsageSample], height: int = 260) -> dict:
    """CPU, RAM and (where there is an NVIDIA GPU) GPU load and memory over time, in percent.
    A gap in the sampling (nobody had the page open) breaks the lines rather than bridging it."""
    rows = _with_gaps(list(samples))
    times = [dt.datetime.fromtimestamp(moment).isoformat(sep=" ", timespec="seconds") for moment, _ in rows]
    series = (
        ("CPU", "cpu_percent", "#2563eb"),
        ("RAM", "ram_percent", "#16a34a"),
        ("GPU", "gpu_percent", "#dc2626"),
        ("GPU memory", "gpu_memory_percent", "#ea580c"),
    )
    data = []
    for name, attribute, color in series:
        values = [getattr(sample, attribute) if sample is not None else None for _, sample in rows]
        if any(value is not None for value in values):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": name,
                    "x": times,
                    "y": values,
                    "connectgaps": False,
                    "line": {"color": color, "width": 2},
                }
            )
    layout = base_layout(height, title="Machine")
    if not samples:
        show_waiting(layout, "Sampling the machine's load…")
        return {"data": data, "layout": layout}
    layout["yaxis"] = {"range": [0, 100], "ticksuffix": " %"}
    layout["xaxis"] = {"type": "date"}
    return {"data": data, "layout": layout}


def _with_gaps(samples: list[UsageSample]) -> list[tuple[float, UsageSample | None]]:
    """(time, sample) rows, with a (time, None) row inside every gap in the sampling: longer than
    GAP_FACTOR times the usual (median) spacing. Plotly breaks a line at a None."""
    if len(samples) < 3:
        return [(sample.time, sample) for sample in samples]
    spacing = float(np.median(np.diff([sample.time for sample in samples])))
    rows: list[tuple[float, UsageSample | None]] = [(samples[0].time, samples[0])]
    for before, after in zip(samples, samples[1:]):
        if spacing > 0 and after.time - before.time > GAP_FACTOR * spacing:
            rows.append(((before.time + after.time) / 2, None))
        rows.append((after.time, after))
    return rows
