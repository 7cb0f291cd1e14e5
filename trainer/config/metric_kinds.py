"""What a metric of trainer/config/metrics.py's registry says about itself: `Metric` (its name,
meaning, unit and who computes it), `Chart` (where the studio draws it), `Exported` (how Prometheus
shows it), and the short constructors the registry's entries use. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = ("envelope", "loop", "update", "exporter", "machine")
PROMETHEUS_PREFIX = "rlstudio_"
PROMETHEUS_RUN_LABELS = ("run_id", "env", "model", "rank")  # on every per-run series


@dataclass(frozen=True)
class Chart:
    """A place in the studio's charts: the main chart (`option`: its menu word) or a small
    diagnostics chart (`position` in the grid, row by row)."""

    group: str  # "main" or "diagnostics"
    label: str  # the chart's title
    position: int = 0
    option: str | None = None  # main chart only: "score", "return", "length"


@dataclass(frozen=True)
class Exported:
    """How Prometheus shows a metric: `rlstudio_<name>`, its type, help and labels."""

    name: str  # without the prefix; a counter's ends in _total
    type: str = "gauge"  # "gauge" or "counter"
    help: str | None = None  # None: the metric's meaning
    per: str = "run"  # "run" (the run labels), "gpu" (label gpu) or "machine" (none)
    labels: tuple[str, ...] = ()  # more labels after the run labels (run_status: status)


@dataclass(frozen=True)
class Metric:
    """One metric. `source` says who computes it: `envelope` (every event's own field), `loop` (the
    training loop), `update` (an algorithm's update: the algorithms that return it say so in their
    `metric_names`), `exporter` (Prometheus, at scrape time) or `machine`. The first three are
    fields of the `metrics` event (`event`: required or optional there)."""

    name: str
    meaning: str  # one line a user understands
    unit: str
    source: str = "loop"
    event: str | None = "required"  # "required", "optional" or None (not a metrics-event field)
    must_be_finite: bool = False  # a null (NaN, inf) in an event means the update diverged
    charts: tuple[Chart, ...] = ()
    csv: bool = False
    tensorboard: str | None = None  # the scalar's tag
    prometheus: Exported | None = None


def update_metric(name: str, meaning: str, unit: str, **shown) -> Metric:
    """An algorithm's metric: an optional field of the metrics event, carried by the events of the
    algorithms that compute it (their `metric_names`), so that a loss one algorithm never computes
    is not read as "not finite" in another's run."""
    return Metric(name, meaning, unit, source="update", **{"event": "optional", **shown})


def exporter(name: str, meaning: str, unit: str, kind: str = "gauge", **exported) -> Metric:
    return Metric(name, meaning, unit, source="exporter", event=None, prometheus=Exported(name, kind, **exported))


def machine(name: str, meaning: str, unit: str, per: str) -> Metric:
    return Metric(name, meaning, unit, source="machine", event=None, prometheus=Exported(name, per=per))


def diagnostic(label: str, position: int) -> Chart:
    return Chart("diagnostics", label, position)
