"""Every metric of a run, declared once: its name, what it means, its unit and where it is shown.

Each output derives its list from `REGISTRY`: the `metrics` event's fields (EVENT_SCHEMA in
trainer/run/events.py), the TensorBoard scalars, the studio's charts (studio/charts.py) and CSV
export (studio/views.py), the Prometheus exporter (trainer/serving/metrics_export.py) and the
README's tables (docs/build.py). A new metric is one `Metric(...)` entry here, plus the code that
computes it; an algorithm's (`update`) metric is one entry of trainer/config/update_metrics.py,
the family `REGISTRY` places among the run's own. tests/test_metric_registry.py fails on a metric
listed anywhere else. Which `update` metrics an algorithm emits, it declares itself
(`metric_names`, checked here by `check_update_metrics` when it registers): no algorithm is named
in this file.

Here, in the lowest room, so that algorithms, the run, serving and the studio all read it
(stdlib only: the studio imports it without torch).
"""

from __future__ import annotations

from trainer.config.metric_kinds import (  # noqa: F401 (SOURCES, PROMETHEUS_*: read from here)
    PROMETHEUS_PREFIX,
    PROMETHEUS_RUN_LABELS,
    SOURCES,
    Chart,
    Exported,
    Metric,
    diagnostic,
    exporter,
    machine,
)
from trainer.config.update_metrics import UPDATE_METRICS

REGISTRY: tuple[Metric, ...] = (
    # Fields of every metrics event (in the order of the CSV export's columns)
    Metric(
        "step",
        "Environment steps taken by the run (all envs, all ranks).",
        "steps",
        csv=True,
        prometheus=Exported("env_steps_total", "counter"),
    ),
    Metric("update", "Policy updates done.", "updates", csv=True, prometheus=Exported("updates_total", "counter")),
    Metric(
        "time",
        "When the update ended (every event carries its time).",
        "unix seconds",
        source="envelope",
        event=None,
        csv=True,
    ),
    Metric("elapsed", "Training seconds, including earlier segments of a resumed run.", "s", csv=True),
    Metric(
        "fps",
        "Environment steps per second in the current session.",
        "steps/s",
        charts=(diagnostic("Steps / s", 6),),
        csv=True,
        tensorboard="losses/fps",
        prometheus=Exported("steps_per_second"),
    ),
    Metric("episodes", "Episodes finished.", "episodes", csv=True, prometheus=Exported("episodes_total", "counter")),
    Metric(
        "episode_return_mean",
        "Mean return of the episodes finished in the last update.",
        "return",
        charts=(Chart("main", "Episode return", 1, "return"),),
        csv=True,
        tensorboard="charts/episode_return_mean",
        prometheus=Exported("episode_return_mean"),
    ),
    Metric(
        "episode_length_mean",
        "Mean length (steps) of the episodes finished in the last update.",
        "steps",
        charts=(Chart("main", "Episode length", 2, "length"), diagnostic("Episode length", 0)),
        csv=True,
        tensorboard="charts/episode_length_mean",
        prometheus=Exported("episode_length_mean"),
    ),
    Metric(
        "episode_score_mean",
        "Mean game score of the episodes finished in the last update.",
        "the game's (pipes, food, ...)",
        charts=(Chart("main", "Game score", 0, "score"),),
        csv=True,
        tensorboard="charts/episode_score_mean",
        prometheus=Exported("episode_score_mean"),
    ),
    Metric(
        "recent_return_mean",
        "Mean return over the last 100 episodes.",
        "return",
        csv=True,
        tensorboard="charts/recent_return_mean",
        prometheus=Exported("recent_episode_return_mean"),
    ),
    *UPDATE_METRICS,  # computed by an algorithm's update: trainer/config/update_metrics.py
    Metric(
        "learning_rate",
        "Learning rate of the last update.",
        "–",
        csv=True,
        tensorboard="losses/learning_rate",
        prometheus=Exported("learning_rate"),
    ),
    # Fields of a metrics event when the trainer has them
    Metric(
        "recent_length_mean",
        "Mean length (steps) over the last 100 episodes.",
        "steps",
        event="optional",
        prometheus=Exported("recent_episode_length_mean"),
    ),
    Metric(
        "recent_score_mean",
        "Mean game score over the last 100 episodes.",
        "the game's",
        event="optional",
        tensorboard="charts/recent_score_mean",
        prometheus=Exported("recent_episode_score_mean"),
    ),
    Metric(
        "episode_return_max", "Best return of the episodes finished in the last update.", "return", event="optional"
    ),
    Metric(
        "episode_score_max",
        "Best game score of the episodes finished in the last update.",
        "the game's",
        event="optional",
    ),
    Metric("episodes_this_update", "Episodes finished in the last update.", "episodes", event="optional"),
    Metric("total_timesteps", "Steps the run takes in all (rounded up to whole updates).", "steps", event="optional"),
    Metric("final_update", "True on the run's last update.", "true/false", event="optional"),
    # Computed by the Prometheus exporter at scrape time, per run
    exporter(
        "nonfinite_losses",
        "How many of policy/value loss, entropy and approx KL were NaN or infinite in the last update.",
        "losses",
    ),
    exporter("return_falling_updates", "Consecutive updates in which the recent mean return fell.", "updates"),
    exporter(
        "return_falling_threshold",
        "The run's warn_falling_updates: the streak the studio warns at and the RLStudioReturnFalling alert fires at.",
        "updates",
    ),
    exporter(
        "checkpoint_age_seconds", "Seconds since the run's last checkpoint (since its start before the first).", "s"
    ),
    exporter(
        "run_status", "1 for the run's current status (label status), 0 for the others.", "1 or 0", labels=("status",)
    ),
    exporter("process_cpu_seconds_total", "CPU seconds used by the run's trainer process.", "s", "counter"),
    exporter("process_resident_memory_bytes", "Resident memory of the run's trainer process.", "bytes"),
    # The machine, not a run
    machine("gpu_utilization_ratio", "GPU utilisation (0-1), per NVIDIA GPU (label gpu).", "0-1", "gpu"),
    machine("gpu_memory_used_bytes", "GPU memory in use, per NVIDIA GPU.", "bytes", "gpu"),
    machine("gpu_memory_total_bytes", "GPU memory, per NVIDIA GPU.", "bytes", "gpu"),
    machine("runs_disk_free_bytes", "Free space on the disk that holds the runs folder.", "bytes", "machine"),
    machine("runs_disk_size_bytes", "Size of the disk that holds the runs folder.", "bytes", "machine"),
)
BY_NAME: dict[str, Metric] = {metric.name: metric for metric in REGISTRY}


# ---------------------------------------------------------------------------------------------
# The views each output reads


def metrics_of(source: str) -> tuple[str, ...]:
    """The names computed by `source` ("loop", "update", "exporter", ...), in registry order."""
    if source not in SOURCES:
        raise KeyError(f"unknown metric source {source!r}; the sources are {', '.join(SOURCES)}")
    return tuple(metric.name for metric in REGISTRY if metric.source == source)


def event_fields(kind: str) -> tuple[str, ...]:
    """The metrics event's "required" or "optional" fields (EVENT_SCHEMA reads both)."""
    return tuple(metric.name for metric in REGISTRY if metric.event == kind)


def check_update_metrics(algo: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """`names`, what algorithm `algo` declares its update returns (its `metric_names`), once each is
    an `update` metric of the registry; ValueError names the ones that are not."""
    if isinstance(names, str) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"algorithm {algo!r}: metric_names is a tuple of metric names, got {names!r}")
    unknown = [name for name in names if name not in BY_NAME or BY_NAME[name].source != "update"]
    if unknown:
        raise ValueError(
            f"algorithm {algo!r} declares update metrics {unknown}, which are not `update` metrics of "
            f"the registry (trainer/config/metrics.py): declare them in trainer/config/update_metrics.py "
            f"(the update ones: {', '.join(metrics_of('update'))})"
        )
    return tuple(names)


def must_be_finite() -> tuple[str, ...]:
    """Fields whose null (NaN, inf) means the update diverged: counted by nonfinite_losses."""
    return tuple(metric.name for metric in REGISTRY if metric.must_be_finite)


def csv_columns() -> tuple[str, ...]:
    """The columns of the studio's metrics.csv, in order."""
    return tuple(metric.name for metric in REGISTRY if metric.csv)


def tensorboard_tags() -> dict[str, str]:
    """metrics field -> the tag of its TensorBoard scalar."""
    return {metric.name: metric.tensorboard for metric in REGISTRY if metric.tensorboard}


def chart_metrics(group: str) -> tuple[tuple[str, Chart], ...]:
    """(metrics field, Chart) of a chart group ("main", "diagnostics"), by position."""
    placed = [(metric.name, chart) for metric in REGISTRY for chart in metric.charts if chart.group == group]
    return tuple(sorted(placed, key=lambda item: item[1].position))


def prometheus_metrics(per_run: bool = True) -> tuple[Metric, ...]:
    """The metrics Prometheus exports per run (or, per_run False, for the machine), in order."""
    return tuple(
        metric for metric in REGISTRY if metric.prometheus is not None and (metric.prometheus.per == "run") == per_run
    )


def prometheus_help(metric: Metric) -> str:
    """The HELP line of an exported metric: its own, else the metric's meaning."""
    return (metric.prometheus.help if metric.prometheus is not None else None) or metric.meaning


def prometheus_labels(exported: Exported) -> tuple[str, ...]:
    """The label names of an exported metric's series."""
    base = {"run": PROMETHEUS_RUN_LABELS, "gpu": ("gpu",), "machine": ()}[exported.per]
    return base + exported.labels


# ---------------------------------------------------------------------------------------------
# The README's tables (docs/build.py GENERATED_TABLES)


def _shown_in(metric: Metric) -> str:
    places = []
    if metric.source == "envelope":
        places.append("metrics.jsonl (every event's own field)")
    if metric.event == "required":
        places.append("metrics.jsonl")
    elif metric.event == "optional":
        places.append("metrics.jsonl (when known)")
    places += [f"{chart.group} chart *{chart.label}*" for chart in metric.charts]
    if metric.csv:
        places.append("CSV")
    if metric.tensorboard:
        places.append(f"TensorBoard `{metric.tensorboard}`")
    if metric.prometheus is not None:
        places.append(f"Prometheus `{PROMETHEUS_PREFIX}{metric.prometheus.name}`")
    return ", ".join(places)


def metrics_markdown() -> str:
    """Every metric as a Markdown table (name, meaning, unit, where it is shown)."""
    lines = ["| metric | meaning | unit | shown in |", "|---|---|---|---|"]
    for metric in REGISTRY:
        lines.append(f"| `{metric.name}` | {metric.meaning.replace('|', '/')} | {metric.unit} | {_shown_in(metric)} |")
    return "\n".join(lines)


def prometheus_markdown() -> str:
    """The exported Prometheus metrics as a Markdown table (name, type, labels, help)."""
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for metric in prometheus_metrics(True) + prometheus_metrics(False):
        exported = metric.prometheus
        assert exported is not None
        labels = ", ".join(prometheus_labels(exported)) or "–"
        lines.append(
            f"| `{PROMETHEUS_PREFIX}{exported.name}` | {exported.type} | {labels} | "
            f"{prometheus_help(metric).replace('|', '/')} |"
        )
    return "\n".join(lines)
