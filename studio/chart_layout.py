"""The pieces every studio chart is built of, as plotly-JSON dicts (studio/charts.py,
studio/system_chart.py): a line trace, the base layout (plotly_white template, legend, margins),
an empty chart's note, a note on the paper, a chart of a single point made readable.
"""

from __future__ import annotations

import functools

import numpy as np


def line(x: np.ndarray, y: np.ndarray, name: str, color: str, width: float, **extra) -> dict:
    return {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "x": x.tolist(),
        "y": y.tolist(),
        "line": {"color": color, "width": width},
        **extra,
    }


@functools.lru_cache(maxsize=1)
def template() -> dict:
    import plotly.io as pio

    return pio.templates["plotly_white"].to_plotly_json()


def base_layout(height: int, title: str | None = None, margin: dict | None = None) -> dict:
    layout = {
        "template": template(),
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


def show_waiting(layout: dict, text: str) -> None:
    """An empty chart: the note alone, no axes (plotly's empty default is -1..6, or a year of
    dates on a date axis)."""
    layout["annotations"] = [note(text, x=0.5, y=0.5, size=14)]
    layout["xaxis"] = {"visible": False}
    layout["yaxis"] = {"visible": False}
    layout["showlegend"] = False


def show_lone_points(figure: dict) -> dict:
    """A curve of one point (the first update) drawn as a dot, and an x-axis whose curves all sit
    at one x spanning from 0 to it: plotly draws a lone point of a line as nothing, on an axis
    zoomed to x ± 1 ("4.095k" to "4.097k")."""
    at: dict[str, set] = {}  # x-axis ("x", "x2", ...) -> the x values of its curves
    for trace in figure["data"]:
        at.setdefault(trace.get("xaxis", "x"), set()).update(trace["x"])
        if len(trace["x"]) == 1:
            trace["mode"] = "lines+markers"
            trace["marker"] = {"color": trace.get("line", {}).get("color"), "size": 8}
    layout = figure["layout"]
    for axis, values in at.items():
        if len(values) == 1:
            layout.setdefault("xaxis" + axis[1:], {})["rangemode"] = "tozero"
    return figure


def note(text: str, x: float, y: float, size: int = 12, **position) -> dict:
    return {
        "text": text,
        "xref": "paper",
        "yref": "paper",
        "x": x,
        "y": y,
        "showarrow": False,
        "font": {"size": size, "color": "#6b7280"},
        **position,
    }
