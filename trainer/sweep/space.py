"""The sweep file: what to tune, over which values, judged by which metric.

    base: configs/cartpole.yaml                       # read like --config
    objective: {metric: recent_score_mean, direction: maximize}
    budget: {total_timesteps: 200000}                 # every trial's length
    space:
      learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}
      num_envs: {choices: [32, 64, 128]}
      gae_lambda: {low: 0.8, high: 0.99}
    pruner: {name: median, reports: 20}               # optional; `sampler: {name: tpe, seed: 0}` too

`read_sweep(path)` checks it against the declared keys (trainer/config/keys.py and the algorithms'
own): an unknown key, a range outside what the key takes, a choice it refuses, a metric no
metrics event carries: one ConfigError that names each problem and its fix, before any trial runs.
A trial's config is the base, the budget and the sampled values, validated by `config_from_dict`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config.checks import ConfigError, Integer, Real, did_you_mean, number_from_text, short_repr
from trainer.config.declaring import DeclaredKey, declared_keys
from trainer.config.defaults import shipped_config_file, with_untuned_defaults
from trainer.config.keys import KEY_ALIASES, TrainConfig
from trainer.config.loading import merge_settings, read_yaml_mapping
from trainer.config.metrics import event_fields
from trainer.config.validation import config_from_dict
from trainer.sweep.search import PRUNERS, SAMPLERS, Choice, read_choice

SECTIONS = ("base", "objective", "budget", "space", "pruner", "sampler")
DIRECTIONS = ("maximize", "minimize")
# The metric at the end of training, the best of the trial's reports, or the mean of its reports
# (the area under its learning curve: rewards learning fast, not only ending well).
MODES = ("final", "best", "mean")
BUDGET_KEYS = ("total_timesteps",)
NOT_SWEPT = {"total_timesteps": "it is the budget: set it under budget", "seed": "give --seeds K instead"}


@dataclass(frozen=True)
class Param:
    """One swept key: a range (`low`..`high`, `log`, `integer`, `step`) or `choices`."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    step: float | None = None
    choices: tuple = ()

    def suggest(self, trial: Any) -> Any:
        """The value of this key for an Optuna trial (a fixed one for a requeued trial)."""
        if self.choices:  # lists ([64, 64] for hidden_sizes) travel through Optuna as JSON text
            encoded = [json.dumps(choice) if isinstance(choice, list) else choice for choice in self.choices]
            value = trial.suggest_categorical(self.name, encoded)
            return self.choices[encoded.index(value)] if value in encoded else value
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)


@dataclass(frozen=True)
class Objective:
    metric: str = "recent_score_mean"
    direction: str = "maximize"
    mode: str = "final"


@dataclass(frozen=True)
class Sweep:
    path: Path
    base_path: Path
    settings: dict  # the base file's settings with the budget on top (raw: merged again per trial)
    config: TrainConfig  # those settings, validated: what every trial starts from
    objective: Objective
    params: tuple[Param, ...]
    pruner: Choice
    sampler: Choice

    @property
    def reports(self) -> int:
        """Points of the budget at which a trial reports its metric (the pruner's steps 1..reports)."""
        return int(self.pruner.options["reports"])

    def trial_config(self, values: dict) -> TrainConfig:
        """The config of a trial that samples `values`; ConfigError when they do not go together."""
        return config_from_dict(with_untuned_defaults(merge_settings(self.settings, values)))

    def definition(self) -> dict:
        """What a continued study must share with the first run of it: the same base, budget,
        space and objective (the pruner and sampler may change between runs)."""
        return {
            "base": self.config.to_dict(),
            "objective": vars(self.objective),
            "space": [vars(param) | {"choices": list(param.choices)} for param in self.params],
        }


def read_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; ConfigError lists every problem, each with its fix."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep file {path} does not exist (give --space FILE.yaml, see docs/sweeps.md)")
    raw = read_yaml_mapping(path)
    problems: list[str] = []
    for section in raw:
        if section not in SECTIONS:
            problems.append(
                f"unknown section {short_repr(section)}.{did_you_mean(section, SECTIONS)} "
                f"A sweep file has: {', '.join(SECTIONS)}"
            )
    base_path, settings, config = _base(raw, path, problems)
    objective = _objective(raw.get("objective"), problems)
    params = _space(raw.get("space"), config, problems)
    pruner = read_choice("pruner", raw.get("pruner", "median"), PRUNERS, problems)
    sampler = read_choice("sampler", raw.get("sampler", "tpe"), SAMPLERS, problems)
    if problems:
        lines = "\n  - ".join(problems)
        raise ConfigError(
            f"{path}: {problems[0]}" if len(problems) == 1 else f"{path} has {len(problems)} problems:\n  - {lines}"
        )
    return Sweep(path, base_path, settings, config, objective, params, pruner, sampler)


def _base(raw: dict, path: Path, problems: list[str]) -> tuple[Path, dict, TrainConfig | None]:
    """`base` read like --config (a shipped config also by its bare name), the budget on top."""
    given = raw.get("base")
    if not isinstance(given, str) or not given.strip():
        problems.append("base: give the config every trial starts from, e.g. base: configs/cartpole.yaml")
        return path, {}, None
    base_path = Path(shipped_config_file(given))
    if not base_path.is_absolute() and not base_path.exists() and (path.parent / base_path).is_file():
        base_path = path.parent / base_path  # relative to the sweep file, when not to the current folder
    budget = raw.get("budget") or {}
    if not isinstance(budget, dict):
        problems.append(f"budget must be a mapping such as {{total_timesteps: 200000}}, got {short_repr(budget)}")
        budget = {}
    for name in budget:
        if name not in BUDGET_KEYS:
            problems.append(
                f"budget: unknown key {short_repr(name)}.{did_you_mean(name, BUDGET_KEYS)} "
                f"budget takes: {', '.join(BUDGET_KEYS)}"
            )
    try:
        settings = merge_settings(read_yaml_mapping(base_path), {k: v for k, v in budget.items() if k in BUDGET_KEYS})
        return base_path, settings, config_from_dict(with_untuned_defaults(settings))
    except ConfigError as error:
        problems.append(f"base {given} (with the budget): {error}")
        return base_path, {}, None


def _objective(raw: Any, problems: list[str]) -> Objective:
    if raw is None:
        return Objective()
    if not isinstance(raw, dict):
        problems.append(
            f"objective must be a mapping such as {{metric: recent_score_mean, direction: maximize}}, got {short_repr(raw)}"
        )
        return Objective()
    for name in raw:
        if name not in ("metric", "direction", "mode"):
            problems.append(f"objective: unknown key {short_repr(name)}; it takes metric, direction and mode")
    metrics = event_fields("required") + event_fields("optional")
    metric = raw.get("metric", Objective.metric)
    if metric not in metrics:
        problems.append(
            f"objective.metric {short_repr(metric)} is not a field of the metrics event.{did_you_mean(metric, metrics)} "
            f"Give one of: {', '.join(metrics)} (docs/operations.md has their meaning)"
        )
    direction = raw.get("direction")
    if direction is None and "metric" in raw:
        problems.append("objective.direction is missing: give direction: maximize or direction: minimize")
    elif direction is not None and direction not in DIRECTIONS:
        problems.append(
            f"objective.direction must be maximize or minimize, got {short_repr(direction)}.{did_you_mean(direction, DIRECTIONS)}"
        )
    mode = raw.get("mode", Objective.mode)
    if mode not in MODES:
        problems.append(
            f"objective.mode must be final (the metric when training ends), best (the best of the "
            f"trial's reports) or mean (the mean of its reports: how fast it learns), got "
            f"{short_repr(mode)}.{did_you_mean(mode, MODES)}"
        )
    return Objective(str(metric), str(direction or "maximize"), str(mode))


def _space(raw: Any, config: TrainConfig | None, problems: list[str]) -> tuple[Param, ...]:
    if not isinstance(raw, dict) or not raw:
        problems.append(
            "space: give the keys to tune and their values, e.g. space: {learning_rate: {low: 1.0e-4, "
            "high: 1.0e-2, log: true}, num_envs: {choices: [32, 64, 128]}}"
        )
        return ()
    declared = {key.name: key for key in declared_keys()}
    params = []
    for name, spec in raw.items():
        canonical = KEY_ALIASES.get(str(name), str(name))
        if canonical not in declared:
            problems.append(
                f"space: unknown config key {short_repr(name)}.{did_you_mean(name, list(declared))} "
                f"space takes the config keys of docs/config.md"
            )
            continue
        if canonical in NOT_SWEPT:
            problems.append(f"space.{canonical}: not swept here: {NOT_SWEPT[canonical]}")
            continue
        key = declared[canonical]
        if config is not None and key.algos and config.algo not in key.algos:
            problems.append(
                f"space.{canonical}: algo {config.algo} (the base's) does not take {canonical}, a key of "
                f"{', '.join(key.algos)}; remove it from the space or change the base's algo"
            )
            continue
        param = _param(key, spec, problems)
        if param is not None:
            params.append(param)
    return tuple(params)


def _param(key: DeclaredKey, spec: Any, problems: list[str]) -> Param | None:
    name, check = key.name, key.check
    if isinstance(spec, list):
        spec = {"choices": spec}  # `num_envs: [32, 64, 128]` is short for choices
    if not isinstance(spec, dict):
        problems.append(f"space.{name}: give {{low: ..., high: ...}} or {{choices: [...]}}, got {short_repr(spec)}")
        return None
    unknown = set(spec) - {"low", "high", "log", "int", "step", "choices"}
    if unknown:
        problems.append(
            f"space.{name}: unknown option(s) {', '.join(sorted(map(str, unknown)))}; a range takes low, high, log, int, step; a list takes choices"
        )
        return None
    if "choices" in spec:
        return _choices(key, spec, problems)
    numeric = isinstance(check, (Integer, Real))
    if not numeric:
        problems.append(f"space.{name}: {name} is not a number, so it takes no range; give choices: [...]")
        return None
    low, high = number_from_text(spec.get("low")), number_from_text(spec.get("high"))
    before = len(problems)
    for label, bound in (("low", low), ("high", high)):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            problems.append(f"space.{name}: {label} must be a number, got {short_repr(bound)}")
            continue
        try:
            check(name, bound)
        except ConfigError as error:
            problems.append(
                f"space.{name}: {label} {bound} is outside what {name} takes ({error}); give a range inside it"
            )
    if len(problems) > before:
        return None
    integer = bool(spec.get("int", isinstance(low, int) and isinstance(high, int)))
    log, step = bool(spec.get("log", False)), number_from_text(spec.get("step"))
    if isinstance(check, Integer) and not (integer and float(low).is_integer() and float(high).is_integer()):
        problems.append(
            f"space.{name}: {name} is an integer key: give integer bounds (low: {int(low)}, high: {int(high)})"
        )
    elif low >= high:
        problems.append(f"space.{name}: low ({low}) must be below high ({high})")
    elif log and low <= 0:
        problems.append(f"space.{name}: a log range needs low > 0, got {low}")
    elif log and step is not None:
        problems.append(f"space.{name}: give log: true or a step, not both")
    elif step is not None and (not isinstance(step, (int, float)) or step <= 0):
        problems.append(f"space.{name}: step must be a positive number, got {short_repr(step)}")
    else:
        return Param(
            name, int(low) if integer else float(low), int(high) if integer else float(high), log, integer, step
        )
    return None


def _choices(key: DeclaredKey, spec: dict, problems: list[str]) -> Param | None:
    name, choices = key.name, spec["choices"]
    if set(spec) != {"choices"}:
        problems.append(f"space.{name}: choices stand alone (no low, high, log, step beside them)")
        return None
    if not isinstance(choices, list) or not choices:
        problems.append(f"space.{name}: choices must be a non-empty list, got {short_repr(choices)}")
        return None
    for choice in choices:
        if isinstance(choice, dict):
            problems.append(f"space.{name}: a choice cannot be a mapping, got {short_repr(choice)}")
            return None
        try:
            key.check(name, number_from_text(choice))
        except ConfigError as error:
            problems.append(f"space.{name}: the choice {short_repr(choice)} is refused: {error}")
            return None
    if len({json.dumps(choice, sort_keys=True) for choice in choices}) != len(choices):
        problems.append(f"space.{name}: a choice is listed twice in {short_repr(choices)}")
        return None
    return Param(name, choices=tuple(number_from_text(choice) for choice in choices))
