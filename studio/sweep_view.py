"""A sweep as the Sweeps tab shows it, read from its folder (trainer/run/layout.py SWEEP_LAYOUT):
the sweeps of a runs folder, the study's trials as a table, their curves from the trials' run
folders, and Optuna's parallel-coordinate and parameter-importance plots.

    names = sweep_names(runs_dir)                      # newest first
    view = read_sweep_view(sweep_folder(runs_dir, names[0]))
    view.rows                                          # TRIAL_COLUMNS, one row a trial
    curves_figure(view), parallel_figure(view), importance_figure(view)   # plotly JSON text

Only reads: the study is opened on its SQLite file, never created; `sweep_stamp` is what changes
when anything shown does, so a poll that finds it unchanged reads nothing else. No gradio.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.chart_layout import base_layout, line, show_waiting
from studio.charts import PALETTE
from trainer.config.checks import ConfigError
from trainer.config.loading import read_yaml_mapping
from trainer.run.events import read_events
from trainer.run.layout import (
    SWEEP_FILE,
    SWEEP_LOG_FILE,
    SWEEPS_DIR,
    best_config_path,
    events_path,
    study_path,
    sweep_folder,
    trials_folder,
)
from trainer.sweep import study as book
from trainer.sweep.search import PRUNERS

TRIAL_COLUMNS = ["trial", "state", "value", "params", "steps", "pruned at"]
MIN_IMPORTANCE_TRIALS = 2  # Optuna's importance needs two finished trials
LOG_LINES = 200  # the tail of the sweep's output the tab shows
FEW_POINTS = 20  # a curve with fewer points shows them as markers too


def sweep_names(runs_dir: str | Path) -> list[str]:
    """The sweeps of a runs folder (those with a study, or a sweep file), the newest first."""
    folder = Path(runs_dir) / SWEEPS_DIR
    try:
        entries = [entry for entry in os.scandir(folder) if entry.is_dir()]
    except OSError:
        return []
    dated = []
    for entry in entries:  # a sweep the studio just started has its sweep file before its study
        for path in (study_path(entry.path), Path(entry.path) / SWEEP_FILE):
            try:
                dated.append((path.stat().st_mtime, entry.name))
                break
            except OSError:
                continue
    return [name for _, name in sorted(dated, reverse=True)]


def known_sweep(runs_dir: str | Path, name: str | None) -> Path | None:
    """The folder of the sweep `name` when the runs folder lists it (a name from the page is
    matched against the listing, never joined into a path as it is)."""
    return sweep_folder(runs_dir, name) if name and name in sweep_names(runs_dir) else None


def sweep_stamp(folder: Path) -> tuple:
    """What changes whenever anything the tab shows of the sweep does: its files' sizes and times."""
    paths = [study_path(folder), folder / SWEEP_LOG_FILE, best_config_path(folder)]
    trials = trials_folder(folder)
    try:
        paths += [events_path(entry.path) for entry in os.scandir(trials) if entry.is_dir()]
    except OSError:
        pass
    stamp = []
    for path in paths:
        try:
            status = os.stat(path)
            stamp.append((str(path), status.st_mtime_ns, status.st_size))
        except OSError:
            continue
    return tuple(stamp)


def sweep_log(folder: Path, lines: int = LOG_LINES) -> str:
    """The tail of the output of a sweep the studio started (empty for one started elsewhere)."""
    try:
        with open(folder / SWEEP_LOG_FILE, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - 64_000))
            text = file.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ----------------------------------------------------------------------------- the study


@functools.lru_cache(maxsize=16)
def _storage(url: str) -> Any:
    return book.open_storage(url)


def open_study(folder: Path) -> Any | None:
    """The Optuna study in the sweep's study.db (None while it has none)."""
    import optuna

    if not study_path(folder).is_file():
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = _storage(book.storage_url(None, folder))
    names = [summary.study_name for summary in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    if not names:
        return None
    name = folder.name if folder.name in names else names[0]
    return optuna.load_study(study_name=name, storage=storage)


@dataclass
class Curve:
    steps: np.ndarray
    values: np.ndarray
    last_step: int  # the run's latest step (its end's, once it ended)


@functools.lru_cache(maxsize=512)
def _curve(path: str, metric: str, mtime_ns: int, size: int) -> Curve:
    """A run's metric by step, from its metrics.jsonl (cached while the file stays the same)."""
    steps, values, last = [], [], 0
    for event in read_events(path):
        step = event.get("step")
        if isinstance(step, int):
            last = max(last, step)
        value = event.get(metric)
        if event.get("type") == "metrics" and isinstance(step, int) and isinstance(value, (int, float)):
            if math.isfinite(value):
                steps.append(step)
                values.append(float(value))
    return Curve(np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64), last)


def run_curve(run_dir: Path, metric: str) -> Curve | None:
    path = events_path(run_dir)
    try:
        status = os.stat(path)
    except OSError:
        return None
    return _curve(str(path), metric, status.st_mtime_ns, status.st_size)


@dataclass
class TrialView:
    number: int
    state: str  # finished, pruned, failed, interrupted, running, queued
    value: float | None
    params: dict
    run_dirs: list[Path]
    error: str = ""
    last_report: int = 0  # the last point of the budget it reported at (1..reports)


@dataclass
class SweepView:
    name: str
    folder: Path
    metric: str = "recent_score_mean"
    direction: str = "maximize"
    trials: list[TrialView] = field(default_factory=list)
    study: Any = None
    best: TrialView | None = None
    budget: int = 0  # every trial's total_timesteps
    reports: int = PRUNERS["median"]["reports"]  # points of the budget a trial reports at

    @property
    def finished(self) -> list[TrialView]:
        return [trial for trial in self.trials if trial.state == "finished"]

    @property
    def finished_key(self) -> tuple:
        """What Optuna's plots are drawn from: they change only when this does."""
        return (str(self.folder), self.metric, tuple((trial.number, trial.value) for trial in self.finished))

    @property
    def rows(self) -> list[list]:
        """The trials table: TRIAL_COLUMNS, the newest trial first."""
        rows = []
        for trial in sorted(self.trials, key=lambda t: t.number, reverse=True):
            curves = [run_curve(run_dir, self.metric) for run_dir in trial.run_dirs]
            steps = max((curve.last_step for curve in curves if curve is not None), default=0)
            pruned_at = self.pruned_at(trial, curves[0]) if trial.state == "pruned" and curves else None
            value = "" if trial.value is None else f"{trial.value:.4g}"
            rows.append(
                [
                    trial.number,
                    trial.state + (f": {trial.error}" if trial.error else ""),
                    value,
                    shown_params(trial.params),
                    steps,
                    "" if pruned_at is None else pruned_at,
                ]
            )
        return rows

    def pruned_at(self, trial: TrialView, curve: Curve | None) -> int | None:
        """The step of the update whose report the pruner stopped `trial` at (what the sweep
        printed): the first at or past its last report point (trainer/sweep/objective.py TrialCurve)."""
        if curve is None or not trial.last_report or not self.budget:
            return None
        reached = curve.steps[curve.steps * self.reports // self.budget >= trial.last_report]
        return int(reached[0]) if len(reached) else None

    def summary(self) -> str:
        """`3 finished, 1 pruned, 1 running of 5 trials; best: trial 2, recent_score_mean 41.2`."""
        if self.study is None:
            return f"**{self.name}**: no study yet."
        counts: dict[str, int] = {}
        for trial in self.trials:
            counts[trial.state] = counts.get(trial.state, 0) + 1
        tally = ", ".join(f"{count} {state}" for state, count in counts.items()) or "no trials yet"
        best = (
            f"; best: trial {self.best.number}, {self.metric} {self.best.value:.4g}"
            if self.best is not None and self.best.value is not None
            else ""
        )
        return f"**{self.name}**: {tally} ({self.direction} {self.metric}){best}."


def state_word(trial: Any) -> str:
    from optuna.trial import TrialState

    if trial.state == TrialState.FAIL and book.INTERRUPTED in trial.system_attrs:
        return "interrupted"
    return {
        TrialState.COMPLETE: "finished",
        TrialState.PRUNED: "pruned",
        TrialState.FAIL: "failed",
        TrialState.RUNNING: "running",
        TrialState.WAITING: "queued",
    }.get(trial.state, trial.state.name.lower())


def shown_params(params: dict) -> str:
    def shown(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return ", ".join(f"{name}={shown(value)}" for name, value in params.items())


def read_sweep_view(folder: Path) -> SweepView:
    """The sweep in `folder` as the tab shows it (no study yet: an empty view)."""
    view = SweepView(folder.name, folder)
    study = open_study(folder)
    if study is None:
        return view
    definition = study.user_attrs.get(book.DEFINITION) or {}
    objective = definition.get("objective") or {}
    view.study = study
    view.metric = str(objective.get("metric") or view.metric)
    view.direction = study.direction.name.lower()
    view.budget = int((definition.get("base") or {}).get("total_timesteps") or 0)
    view.reports = _reports(folder)
    for trial in study.get_trials(deepcopy=False):
        if book.SURPLUS in trial.system_attrs:
            continue  # asked past --trials by a racing worker: never ran
        dirs = [folder / str(path) for path in trial.user_attrs.get("run_dirs") or []]
        view.trials.append(
            TrialView(
                trial.number,
                state_word(trial),
                trial.value if trial.values else None,
                dict(trial.params),
                dirs,
                str(trial.user_attrs.get("error") or "")[:200],
                max(trial.intermediate_values, default=0),
            )
        )
    finished = view.finished
    if finished:
        pick = max if view.direction == "maximize" else min
        view.best = pick(finished, key=lambda trial: trial.value)
    return view


def _reports(folder: Path) -> int:
    """The sweep's `pruner.reports` (its sweep file, when the studio started it), else the default."""
    default = int(PRUNERS["median"]["reports"])
    try:
        pruner = read_yaml_mapping(folder / SWEEP_FILE).get("pruner")
    except (OSError, ConfigError):
        return default
    reports = pruner.get("reports", default) if isinstance(pruner, dict) else default
    return reports if isinstance(reports, int) and reports >= 1 else default


# ----------------------------------------------------------------------------- the charts


def curves_figure(view: SweepView, height: int = 360) -> str:
    """Every trial's metric by step on one chart: finished trials in colour (the best one
    thicker), pruned, failed and interrupted ones faded, running ones dashed."""
    layout = base_layout(height, f"{view.metric} of every trial")
    layout["xaxis"] = {"title": {"text": "step"}}
    layout["yaxis"] = {"title": {"text": view.metric}}
    traces = []
    for trial in sorted(view.trials, key=lambda t: t.number):
        for index, run_dir in enumerate(trial.run_dirs):
            curve = run_curve(run_dir, view.metric)
            if curve is None or not len(curve.steps):
                continue
            faded = trial.state in ("pruned", "failed", "interrupted")
            best = view.best is not None and trial.number == view.best.number
            color = "#9ca3af" if faded else PALETTE[trial.number % len(PALETTE)]
            name = f"trial {trial.number}" + (f" seed {index + 1}" if len(trial.run_dirs) > 1 else "")
            extra: dict = {"opacity": 0.45 if faded else 1.0, "legendgroup": f"trial {trial.number}"}
            if len(curve.steps) < FEW_POINTS:  # a point or two is no line: show the points
                extra |= {"mode": "lines+markers", "marker": {"size": 6, "color": color}}
            if trial.state == "running":
                extra["line"] = {"color": color, "width": 1.5, "dash": "dot"}
            traces.append(
                line(curve.steps, curve.values, f"{name} ({trial.state})", color, 3.0 if best else 1.5, **extra)
            )
    if not traces:
        show_waiting(layout, "The curves appear with the trials' first updates")
    return json.dumps({"data": traces, "layout": layout})


def _optuna_figure(figure: Any, height: int) -> str:
    figure.update_layout(height=height, template="plotly_white", margin={"l": 60, "r": 30, "t": 60, "b": 45})
    return figure.to_json()


def _waiting(text: str, height: int, title: str) -> str:
    layout = base_layout(height, title)
    show_waiting(layout, text)
    return json.dumps({"data": [], "layout": layout})


def parallel_figure(view: SweepView, height: int = 380) -> str:
    """Optuna's parallel-coordinate plot of the finished trials (a note until one has finished)."""
    if view.study is None or not view.finished:
        return _waiting("The parallel-coordinate plot appears when a trial finishes", height, "Parallel coordinates")
    from optuna.visualization import plot_parallel_coordinate

    return _optuna_figure(plot_parallel_coordinate(view.study, target_name=view.metric), height)


def importance_figure(view: SweepView, height: int = 320) -> str:
    """Optuna's parameter importances (a note until MIN_IMPORTANCE_TRIALS trials have finished,
    or when they cannot be told apart, e.g. every trial sampled the same values)."""
    title = "Parameter importance"
    if view.study is None or len(view.finished) < MIN_IMPORTANCE_TRIALS:
        done = len(view.finished)
        return _waiting(
            f"Parameter importance needs {MIN_IMPORTANCE_TRIALS} finished trials ({done} so far)", height, title
        )
    from optuna.visualization import plot_param_importances

    try:
        return _optuna_figure(plot_param_importances(view.study, target_name=view.metric), height)
    except (RuntimeError, ValueError, ZeroDivisionError) as error:
        return _waiting(f"No importance yet: {error}"[:160], height, title)
