"""The Sweeps tab's form as data: which keys a sweep may tune (the keys' own declarations,
trainer/config/), a row of the space prefilled from a key's bounds or choices, the form written
as a sweep file (docs/sweeps.md), and a sweep file made safe for the studio to run.

    rows = [space_row("learning_rate"), space_row("num_envs")]
    text = sweep_text("cartpole", "ppo", rows, "recent_score_mean", "maximize", "final", 50_000, "median")
    sweep, base = studio_sweep(text, allow_custom_envs=False)   # base: the full base config

In the studio a sweep's `base` is a shipped config (`cartpole.yaml`) or a mapping of settings
(`{env_name: snake, algo: dqn}`: the env's tuned config for that algorithm, the settings on top);
the studio writes it as `base.yaml` beside the sweep file in the sweep's folder, so a sweep never
reads another file of the server. Nothing here imports gradio.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from studio.form import FormError, check_web_safety
from trainer.config.checks import Boolean, ConfigError, Integer, Real
from trainer.config.declaring import DeclaredKey, declared_keys
from trainer.config.defaults import CONFIGS_DIR, shipped_config, shipped_config_path
from trainer.config.loading import merge_settings, read_yaml_mapping
from trainer.config.metrics import event_fields
from trainer.config.safe_yaml import YamlError, dump_yaml, load_yaml_text
from trainer.run.files import atomic_write
from trainer.run.layout import SWEEP_BASE_FILE, SWEEP_FILE
from trainer.sweep.search import PRUNERS
from trainer.sweep.space import DIRECTIONS, MODES, NOT_SWEPT, Objective, read_sweep

SPACE_COLUMNS = ["key", "low", "high", "log", "choices"]
NOT_OFFERED = {"env_name", "algo", "device"}  # what a sweep is about, or where it runs: not tuned
# The form's groups of keys about where and how a run trains, not how well it learns: not offered
# (a pasted sweep file may still tune them).
NOT_OFFERED_GROUPS = ("Environment options", "Processes and cluster", "Checkpoints, GIFs and logs")
DEFAULT_KEYS = ("learning_rate",)  # the space a new form starts with
LOG_RATIO = 100  # a range this wide (high / low) is prefilled on a log scale


def objective_metrics() -> list[str]:
    """The fields of the metrics event a sweep may judge trials by (Objective's default first)."""
    fields = event_fields("required") + event_fields("optional")
    return [Objective.metric] + [name for name in fields if name != Objective.metric]


def pruner_names() -> list[str]:
    return list(PRUNERS)


def sweepable(algo: str) -> list[DeclaredKey]:
    """The declared keys the form offers for a sweep of `algo`: the keys of the studio's form that
    algorithm takes, but the budget, the seed, the env, the algorithm, the device and the groups
    about where and how a run trains."""
    return [
        key
        for key in declared_keys()
        if key.group
        and key.group not in NOT_OFFERED_GROUPS
        and key.name not in NOT_SWEPT
        and key.name not in NOT_OFFERED
        and (not key.algos or algo in key.algos)
    ]


def sweepable_names(algo: str) -> list[str]:
    return [key.name for key in sweepable(algo)]


def space_row(name: str, base: dict | None = None) -> list[Any]:
    """A space row for `name` [key, low, high, log, choices], prefilled from its declaration and
    its value in the `base` config (else its declared default): a number key from a tenth to ten
    times the value (four times for an integer), inside its declared bounds, on a log scale when
    that is wide; a choice key's choices; true/false; else the value as the one choice."""
    keys = {key.name: key for key in declared_keys()}
    if name not in keys or name in NOT_SWEPT:
        raise FormError(f"{name!r} is not a config key a sweep can tune (docs/config.md lists them)")
    key = keys[name]
    check, default = key.check, (base or {}).get(name)
    default = key.default if default is None else default
    if isinstance(check, Real):
        low, high = _bounds(check.low, check.high, default, check.low_open)
        return [name, _shown(low), _shown(high), low > 0 and high / low >= LOG_RATIO, ""]
    if isinstance(check, Integer):
        base = default if isinstance(default, int) and default >= 1 else check.minimum
        low = max(check.minimum, base // 4 if base >= 4 else check.minimum)
        high = base * 4 if check.maximum is None else min(check.maximum, base * 4)
        if high <= low:
            high = low + 1 if check.maximum is None else check.maximum
        return [name, str(low), str(high), low > 0 and high / low >= 16, ""]
    if check.choices:
        return [name, "", "", False, _flow(list(check.choices))]
    if isinstance(check, Boolean):
        return [name, "", "", False, "[true, false]"]
    return [name, "", "", False, _flow([default])]


def _bounds(low: float | None, high: float | None, default: Any, low_open: bool) -> tuple[float, float]:
    """A tenth to ten times a positive `default`, inside [low, high]; else the bounds themselves."""
    if isinstance(default, (int, float)) and not isinstance(default, bool) and default > 0:
        wanted_low, wanted_high = default / 10, default * 10
        low = wanted_low if low is None or low < wanted_low else (low if not low_open else wanted_low)
        high = wanted_high if high is None or high > wanted_high else high
    low = 0.0 if low is None else low
    return float(low), float(low + 1.0 if high is None or high <= low else high)


def _shown(value: float) -> str:
    return f"{value:.6g}"


def _flow(values: list) -> str:
    """`[32, 64, 128]`: a list as one line of YAML, what a choices cell holds."""
    import yaml

    return yaml.safe_dump(values, default_flow_style=True, sort_keys=False).strip()


# ----------------------------------------------------------------------------- form -> sweep file


def space_from_rows(rows: Sequence[Sequence[Any]]) -> dict:
    """The `space` section from the form's rows (a blank key skipped); FormError names a bad cell."""
    space: dict = {}
    for row in rows:
        cells = list(row) + [""] * (len(SPACE_COLUMNS) - len(row))
        name = str(cells[0] or "").strip()
        if not name:
            continue
        low, high, log, choices = cells[1], cells[2], _truthy(cells[3]), str(cells[4] or "").strip()
        if choices:
            try:
                values = load_yaml_text(choices, f"the choices of {name}", mapping=False)
            except YamlError as error:
                raise FormError(f"{error}: write the choices as a list, e.g. [32, 64, 128]") from None
            space[name] = {"choices": values if isinstance(values, list) else [values]}
            continue
        spec = {"low": _number(name, "low", low), "high": _number(name, "high", high)}
        if log:
            spec["log"] = True
        space[name] = spec
    if not space:
        raise FormError("The space is empty: add a key to tune (Add key), or paste a sweep file.")
    return space


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _number(name: str, label: str, value: Any) -> int | float:
    text = str(value if value is not None else "").strip()
    try:
        number = float(text)
    except ValueError:
        raise FormError(f"{name}: {label} must be a number, got {text!r} (or give choices instead)") from None
    if not math.isfinite(number):
        raise FormError(f"{name}: {label} must be a finite number, got {text!r}")
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


def base_of(env_name: str, algo: str) -> str | dict:
    """A sweep's `base` for a game and an algorithm: its shipped config by name, else the settings."""
    path = shipped_config_path(env_name, algo)
    return path.name if path is not None else {"env_name": env_name, "algo": algo}


def sweep_dict(
    env_name: str,
    algo: str,
    rows: Sequence[Sequence[Any]],
    metric: str,
    direction: str,
    mode: str,
    total_timesteps: Any,
    pruner: str,
) -> dict:
    """The form as a sweep file's sections (docs/sweeps.md)."""
    if not env_name:
        raise FormError("Pick a game (env_name) for the sweep's base config.")
    try:
        budget = int(float(total_timesteps))
    except (TypeError, ValueError):
        raise FormError(f"total_timesteps must be a whole number, got {total_timesteps!r}") from None
    objective = {"metric": metric or Objective.metric, "direction": direction or "maximize"}
    if mode and mode != Objective.mode:
        objective["mode"] = mode
    return {
        "base": base_of(env_name, algo or "ppo"),
        "objective": objective,
        "budget": {"total_timesteps": budget},
        "space": space_from_rows(rows),
        "pruner": {"name": pruner or "median"},
    }


def sweep_text(*form_values: Any) -> str:
    """The form (sweep_dict's arguments) as the text of a sweep file."""
    return dump_yaml(sweep_dict(*form_values))


# ----------------------------------------------------------------------------- a sweep the studio runs


def studio_sweep(text: str, allow_custom_envs: bool) -> tuple[dict, dict]:
    """A pasted or form-built sweep file -> (its sections with `base: base.yaml`, the base config's
    settings). FormError when the base is neither a shipped config nor settings, or when the base
    or a choice would run code or write files the studio does not allow (studio/form.py)."""
    if not text or not text.strip():
        raise FormError("The sweep file is empty: build it from the form, or paste one.")
    try:
        raw = load_yaml_text(text, "The sweep file")
    except YamlError as error:
        raise FormError(f"{error}.") from None
    base = _base_settings(raw.get("base"))
    check_web_safety(base, allow_custom_envs)
    space = raw.get("space")
    for name, spec in space.items() if isinstance(space, dict) else ():
        choices = spec if isinstance(spec, list) else spec.get("choices") if isinstance(spec, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            try:
                check_web_safety(merge_settings(base, {str(name): choice}), allow_custom_envs)
            except ConfigError:
                continue  # not a value the key takes: read_sweep says so, with the key's own words
    return {**raw, "base": SWEEP_BASE_FILE}, base


def check_sweep(sweep: dict, base: dict) -> None:
    """read_sweep on the files as the studio writes them (studio_sweep's two parts), in a
    folder of their own: ConfigError lists every problem, before the sweep's folder exists."""
    with tempfile.TemporaryDirectory(prefix="rl-studio-sweep-") as folder:
        atomic_write(Path(folder) / SWEEP_BASE_FILE, dump_yaml(base))
        path = atomic_write(Path(folder) / SWEEP_FILE, dump_yaml(sweep))
        try:
            read_sweep(path)
        except ConfigError as error:  # said of "the sweep file", not of a folder the user never saw
            raise ConfigError(str(error).replace(str(path), "the sweep file")) from None


def _base_settings(given: Any) -> dict:
    """The settings `base` names: a shipped config (by its name, looked up in the configs' listing,
    never joined into a path) or a mapping of settings over the env's tuned config."""
    shipped = sorted(path.name for path in CONFIGS_DIR.glob("*.yaml")) if CONFIGS_DIR.is_dir() else []
    if isinstance(given, dict):
        env_name = given.get("env_name", "cartpole")
        try:
            return shipped_config(str(env_name), given).to_dict()
        except ConfigError as error:
            raise FormError(f"base: {error}") from None
    if isinstance(given, str) and Path(given.strip()).name in shipped:
        return read_yaml_mapping(CONFIGS_DIR / Path(given.strip()).name)
    raise FormError(
        f"base: the studio starts a sweep from a shipped config ({', '.join(shipped)}) or from settings "
        f"such as {{env_name: snake, algo: dqn}}; got {given!r}. A sweep over another file runs from the "
        f"command line: python -m trainer sweep --space FILE"
    )


__all__ = [
    "DEFAULT_KEYS",
    "DIRECTIONS",
    "MODES",
    "SPACE_COLUMNS",
    "base_of",
    "check_sweep",
    "objective_metrics",
    "pruner_names",
    "space_from_rows",
    "space_row",
    "studio_sweep",
    "sweep_dict",
    "sweep_text",
    "sweepable_names",
]
