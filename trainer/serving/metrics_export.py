"""Prometheus metrics of training runs: their table (`METRICS`, derived from the metric registry
trainer/config/metrics.py, where each name, type and help is declared), the one collector that
turns runs into the text format, and the trainer's sink of them (served on `--metrics-port` by
trainer/serving/metrics_server.py).

    python -m trainer --config configs/cartpole.yaml --metrics-port 9109   # http://127.0.0.1:9109/metrics

The studio serves the same collector on its own `/metrics` (studio/metrics.py) for every run it
knows; a headless trainer serves its one run. Each run's series carry the labels `run_id`, `env`,
`model` and `rank` (the torchrun RANK of the process that serves them, "0" when not distributed);
its status is the `status` label of `rlstudio_run_status` only (a label
that changes value on every series would split each counter into new series and break `rate()`).

Nothing here runs per training step: the trainer's sink keeps the latest event (a dict
assignment per update) and all the work happens when Prometheus scrapes, on the server's thread.

Distributed runs: only rank 0 serves `--metrics-port` (the other ranks ignore it). Its step and
episode counters already count every rank and its losses are the all-reduced ones, so a second
rank serving the same run would double every `sum()`; its series say `rank="0"`, so a dashboard
can tell the distributed run's writer from a single-process run's.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from trainer.config.keys import TrainConfig
from trainer.config.metrics import (
    PROMETHEUS_PREFIX,
    PROMETHEUS_RUN_LABELS,
    must_be_finite,
    prometheus_help,
    prometheus_labels,
    prometheus_metrics,
)
from trainer.run.status import ACTIVE_STATUSES, RUN_STATUSES

PREFIX = PROMETHEUS_PREFIX
RUN_LABELS = PROMETHEUS_RUN_LABELS
LOSS_FIELDS = must_be_finite()  # None in an event = not finite
DEFAULT_FALLING_UPDATES: int = TrainConfig.warn_falling_updates  # declared once, in trainer/config/keys.py

# Derived from the metric registry (trainer/config/metrics.py), where every name, type and help is
# declared: name (without the prefix) -> (type, metrics-event field or None for derived ones, help).
METRICS: dict[str, tuple[str, str | None, str]] = {
    metric.prometheus.name: (metric.prometheus.type, metric.name if metric.event else None, prometheus_help(metric))
    for metric in prometheus_metrics(per_run=True)
    if metric.prometheus is not None
}
# Not per run: the machine (label gpu) and the runs folder's disk.
MACHINE_METRICS: dict[str, tuple[str, str]] = {
    metric.prometheus.name: (metric.prometheus.type, prometheus_help(metric))
    for metric in prometheus_metrics(per_run=False)
    if metric.prometheus is not None
}


def exported_names() -> set[str]:
    """Every sample name this project exports (counters also as `_total`), for the dashboard and
    alert tests."""
    return {PREFIX + name for name in METRICS} | {PREFIX + name for name in MACHINE_METRICS}


# ---------------------------------------------------------------------------------------------
# The warnings the studio shows and the alerts fire on: one definition of each


def falling_streaks(returns: Iterable[float | None]) -> list[int]:
    """For each update, how many consecutive updates up to it the return fell. An update without
    a value (no episode ended yet) neither extends nor breaks a streak: it repeats the last count."""
    streaks, previous, streak = [], None, 0
    for value in returns:
        if value is not None and math.isfinite(value):
            streak = streak + 1 if previous is not None and value < previous else 0
            previous = value
        streaks.append(streak)
    return streaks


def falling_streak(returns: Iterable[float | None]) -> int:
    """How many consecutive updates, counted back from the latest, the return fell."""
    streaks = falling_streaks(returns)
    return streaks[-1] if streaks else 0


def nonfinite_losses(metrics: dict) -> list[str]:
    """The loss fields of a metrics event that were NaN or infinite (events carry them as null). An
    update without a gradient step (a replay algorithm before `learning_starts`) has no losses."""
    if metrics.get("gradient_steps") == 0:
        return []
    bad = []
    for name in LOSS_FIELDS:
        if name not in metrics:
            continue
        value = metrics[name]
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            bad.append(name)
    return bad


# ---------------------------------------------------------------------------------------------
# What the collector reads: one snapshot per run


@dataclass
class RunSample:
    """What the exporter knows about one run at scrape time."""

    run_id: str
    env: str
    model: str
    status: str
    metrics: dict | None = None  # the latest metrics event
    returns: Sequence[float | None] = ()  # recent_return_mean of the latest updates, oldest first
    last_checkpoint_at: float | None = None
    started_at: float | None = None
    pid: int | None = None
    falling_threshold: int = DEFAULT_FALLING_UPDATES
    rank: str = "0"  # torchrun RANK of the serving process (see the module doc)

    @property
    def labels(self) -> list[str]:
        return [self.run_id, self.env, self.model, self.rank]


def process_rank() -> str:
    """This process's torchrun RANK ("0" when not distributed): what DistributedContext reads too."""
    return str(os.environ.get("RANK", "0")).strip() or "0"


def _number(value: object) -> float | None:
    if value is None:
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _process_numbers(pid: int | None) -> tuple[float, float] | None:
    if pid is None:
        return None
    import psutil

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times, memory = process.cpu_times(), process.memory_info()
        return times.user + times.system, float(memory.rss)
    except (psutil.Error, OSError):
        return None


def gpu_readings() -> list[tuple[str, float, float, float]]:
    """(index, utilisation 0-1, memory used bytes, memory total bytes) per NVIDIA GPU; [] without
    one. pynvml when installed, else nvidia-smi."""
    try:
        import pynvml

        pynvml.nvmlInit()
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(
                (
                    str(index),
                    pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
                    float(memory.used),
                    float(memory.total),
                )
            )
        return found
    except Exception:  # noqa: BLE001 - no pynvml, no driver: try nvidia-smi
        pass
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        output = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpu_csv(output)


def parse_gpu_csv(output: str) -> list[tuple[str, float, float, float]]:
    """nvidia-smi's `index,utilization.gpu,memory.used,memory.total` (MiB) rows; unreadable rows
    ("[N/A]" on some boards) are left out."""
    found = []
    for line in output.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        try:
            index, utilisation, used, total = parts[0], *(float(part) for part in parts[1:4])
        except (ValueError, IndexError):
            continue
        found.append((index, utilisation / 100.0, used * 2**20, total * 2**20))
    return found


class RunsCollector(Collector):
    """A prometheus_client collector over `runs()` (called at each scrape) and the disk of
    `runs_dir`. The studio and the trainer both register one."""

    def __init__(
        self,
        runs: Callable[[], Iterable[RunSample]],
        runs_dir: str | Path | None = None,
        gpus: Callable[[], list[tuple[str, float, float, float]]] = gpu_readings,
    ):
        self.runs = runs
        self.runs_dir = Path(runs_dir) if runs_dir is not None else None
        self.gpus = gpus

    def collect(self):
        families = {}
        for metric in prometheus_metrics(per_run=True):
            exported = metric.prometheus
            assert exported is not None
            family_type = CounterMetricFamily if exported.type == "counter" else GaugeMetricFamily
            # CounterMetricFamily appends _total itself: give it the base name.
            base = PREFIX + (exported.name.removesuffix("_total") if exported.type == "counter" else exported.name)
            families[exported.name] = family_type(
                base, prometheus_help(metric), labels=list(prometheus_labels(exported))
            )
        now = time.time()
        for run in self.runs():
            self._add_run(families, run, now)
        yield from families.values()
        yield from self._machine()

    def _add_run(self, families: dict, run: RunSample, now: float) -> None:
        labels = run.labels
        metrics = run.metrics or {}
        for name, (_, source, _) in METRICS.items():
            if source is None:
                continue
            value = _number(metrics.get(source))
            if source in LOSS_FIELDS and source in metrics and value is None:
                value = math.nan
            if value is not None:
                families[name].add_metric(labels, value)
        if run.metrics is not None:
            families["nonfinite_losses"].add_metric(labels, len(nonfinite_losses(run.metrics)))
        families["return_falling_updates"].add_metric(labels, falling_streak(run.returns))
        families["return_falling_threshold"].add_metric(labels, run.falling_threshold)
        since = run.last_checkpoint_at or run.started_at
        if since is not None:
            families["checkpoint_age_seconds"].add_metric(labels, max(0.0, now - since))
        for status in RUN_STATUSES:
            families["run_status"].add_metric(labels + [status], 1.0 if run.status == status else 0.0)
        process = _process_numbers(run.pid) if run.status in ACTIVE_STATUSES else None
        if process is not None:
            families["process_cpu_seconds_total"].add_metric(labels, process[0])
            families["process_resident_memory_bytes"].add_metric(labels, process[1])

    def _machine(self):
        readings = self.gpus()
        if readings:
            columns = {"gpu_utilization_ratio": 1, "gpu_memory_used_bytes": 2, "gpu_memory_total_bytes": 3}
            for name, column in columns.items():
                family = GaugeMetricFamily(PREFIX + name, MACHINE_METRICS[name][1], labels=["gpu"])
                for reading in readings:
                    family.add_metric([reading[0]], reading[column])
                yield family
        if self.runs_dir is not None:
            try:
                usage = shutil.disk_usage(self.runs_dir)
            except OSError:
                return
            yield GaugeMetricFamily(
                PREFIX + "runs_disk_free_bytes", MACHINE_METRICS["runs_disk_free_bytes"][1], value=usage.free
            )
            yield GaugeMetricFamily(
                PREFIX + "runs_disk_size_bytes", MACHINE_METRICS["runs_disk_size_bytes"][1], value=usage.total
            )


# ---------------------------------------------------------------------------------------------
# The trainer's side: an event sink (its HTTP server: trainer/serving/metrics_server.py)


@dataclass
class MetricsSink:
    """An event sink that remembers what the exporter needs; cheap enough to run every update."""

    run_id: str = "?"
    env: str = "?"
    model: str = "?"
    falling_threshold: int = DEFAULT_FALLING_UPDATES
    status: str = "starting"
    metrics: dict | None = None
    returns: deque = field(default_factory=lambda: deque(maxlen=1001))
    last_checkpoint_at: float | None = None
    started_at: float = field(default_factory=time.time)
    rank: str = field(default_factory=process_rank)
    essential = False

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "start":
            config = event.get("config") or {}
            self.run_id = str(event.get("run_id") or self.run_id)
            self.env = str(config.get("env_name", self.env))
            self.model = str(config.get("model_type", self.model))
            self.falling_threshold = int(config.get("warn_falling_updates", self.falling_threshold))
            self.status = "running"
        elif kind == "metrics":
            self.metrics = event
            self.returns.append(event.get("recent_return_mean"))
        elif kind == "checkpoint":
            self.last_checkpoint_at = float(event.get("time") or time.time())
        elif kind == "end":
            self.status = str(event.get("status") or "finished")
        elif kind == "error":
            self.status = "failed"

    def close(self) -> None:
        pass

    def sample(self) -> RunSample:
        return RunSample(
            self.run_id,
            self.env,
            self.model,
            self.status,
            self.metrics,
            list(self.returns),
            self.last_checkpoint_at,
            self.started_at,
            os.getpid(),
            self.falling_threshold,
            self.rank,
        )
