"""Where a config's settings start from, before the user's own: the tuned file of a built-in
game (configs/<game>.yaml), or for any other env the defaults for its kind of actions
(`UNTUNED_DEFAULTS`); keys neither gives keep their declared defaults (trainer/config/keys.py).

    shipped_config("flappy_bird")          # configs/flappy_bird.yaml, as a TrainConfig
    shipped_config("Pendulum-v1")          # the defaults for continuous actions
    defaults_source("Pendulum-v1")         # "the defaults for continuous (Box) actions (no tuned config for Pendulum-v1)"

The CLI (`load_config`), the Python API and the studio's form all go through these functions, so
one env starts from the same settings everywhere.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from trainer.config.keys import KEY_ALIASES, TrainConfig
from trainer.config.loading import merge_settings, parse_override, read_yaml_mapping
from trainer.config.reference import markdown_value
from trainer.config.validation import config_from_dict

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"  # the shipped, tuned configs


def shipped_config_path(env_name: str, algo: str = "ppo") -> Path | None:
    """The tuned config of `env_name` trained by `algo`: configs/<game>.yaml for a built-in game and
    PPO, else the shipped file whose own `env_name` and `algo` name them (configs/cartpole_dqn.yaml,
    configs/pendulum_sac.yaml); None when there is none. User text never becomes part of a path:
    the files are looked up in the folder's listing by what they say."""
    canonical = _canonical(env_name)
    if canonical is None:
        return None
    from envs import builtin_env_names

    if algo == "ppo" and canonical in builtin_env_names():
        path = CONFIGS_DIR / f"{canonical}.yaml"
        return path if path.is_file() else None
    return _tuned_files().get((canonical, str(algo)))


def _canonical(env_name: Any) -> str | None:
    from envs import resolve_env_name
    from envs.errors import EnvError

    try:
        return resolve_env_name(str(env_name))
    except EnvError:
        return None


@functools.lru_cache(maxsize=1)
def _tuned_files() -> dict[tuple[str, str], Path]:
    """(canonical env, algo) -> the first shipped config (by name) that trains it."""
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(CONFIGS_DIR.glob("*.yaml")) if CONFIGS_DIR.is_dir() else []:
        settings = read_yaml_mapping(path)
        canonical = _canonical(settings.get("env_name", TrainConfig.env_name))
        if canonical is not None:
            found.setdefault((canonical, str(settings.get("algo", "ppo"))), path)
    return found


def shipped_config(env_name: str, settings: dict | None = None) -> TrainConfig:
    """The tuned config of `env_name` for the algorithm `settings` names (ppo when none), else the
    defaults for the env's kind of actions and that algorithm (`untuned_defaults`), `settings` on top."""
    settings = merge_settings({"env_name": env_name}, settings or {})
    path = shipped_config_path(env_name, str(settings.get("algo", "ppo")))
    if path is None:
        return config_from_dict(with_untuned_defaults(settings))
    return config_from_dict(merge_settings(read_yaml_mapping(path), settings))


def defaults_source(env_name: str, algo: str = "ppo") -> str:
    """Where `shipped_config(env_name)` takes its settings from, in words for a person: the
    tuned file, or which defaults (the studio says it when the env or the algorithm changes)."""
    path = shipped_config_path(env_name, algo)
    if path is not None:
        return f"the tuned config configs/{path.name}"
    if algo in UNTUNED_REPLAY_DEFAULTS:
        return f"the defaults for {algo} (no tuned config for {env_name} with {algo})"
    kind = action_kind_of_env(env_name)
    which = f"the defaults for {ACTION_KINDS[kind]}" if kind else "the defaults"
    return f"{which} (no tuned config for {env_name})"


# ---------------------------------------------------------------------------------------------
# Defaults for an env without a tuned config, by its kind of actions: the one rule, read by
# `load_config` (the CLI), `shipped_config` (the Python API, the studio's form and API) and the
# API's env objects. A key a table leaves out keeps its declared default.

ACTION_KINDS = {"discrete": "discrete actions", "continuous": "continuous (Box) actions"}
UNTUNED_DEFAULTS: dict[str, dict[str, Any]] = {
    # The declared defaults: they learn CartPole and Acrobot through Gymnasium.
    "discrete": {},
    # The RL Zoo's tuned PPO for Pendulum-v1 (rl-baselines3-zoo hyperparams/ppo.yml, without
    # gSDE), which also fit other small control tasks: few envs with long rollouts, many
    # epochs, no entropy bonus (the Gaussian's state-independent log-std is learned),
    # normalised observations and rewards. gamma 0.9 is short-sighted on purpose: torques pay
    # off within a few steps; long-horizon tasks (locomotion) want 0.99.
    "continuous": {
        "num_envs": 4,
        "num_steps": 1024,
        "update_epochs": 10,
        "learning_rate": 1e-3,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "clip_coef": 0.2,
        "ent_coef": 0.0,
        "norm_obs": True,
        "norm_reward": True,
    },
}

# What another rollout algorithm changes in its kind's table: the table's keys it refuses, with the
# value it accepts (the table is PPO's; a key an algorithm does not take at all is left out when
# its config is merged, trainer/config/loading.py). A2C makes one pass over a rollout; IMPALA and
# APPO learn from batches that actors played with the env's own observations and rewards.
UNTUNED_CHANGES: dict[str, dict[str, Any]] = {
    "a2c": {"update_epochs": 1},
    "impala": {"norm_obs": False, "norm_reward": False},
    "appo": {"norm_obs": False, "norm_reward": False},
}


# The replay algorithms start from their own (PPO's rollout keys mean nothing to them): a few
# envs, one step each per update, a constant learning rate; their own keys keep their declared
# defaults (trainer/algos/replay_settings.py, dqn_settings.py, sac_settings.py).
UNTUNED_REPLAY_DEFAULTS: dict[str, dict[str, Any]] = {
    "dqn": {"num_envs": 4, "learning_rate": 5e-4, "anneal_lr": False},
    "sac": {"num_envs": 4, "learning_rate": 1e-3, "anneal_lr": False, "model_type": "ppo-medium"},
}


def untuned_defaults(env: Any, algo: str = "ppo") -> dict[str, Any]:
    """The settings an env without a tuned config starts from: `UNTUNED_REPLAY_DEFAULTS` for a replay
    algorithm, else `UNTUNED_DEFAULTS` for its kind of actions ({} when that is unknown). `env`: an
    env name, or the env's single action space."""
    if algo in UNTUNED_REPLAY_DEFAULTS:
        return dict(UNTUNED_REPLAY_DEFAULTS[algo])
    kind = action_kind_of_env(env) if isinstance(env, str) else action_kind(env)
    return _changed(UNTUNED_DEFAULTS.get(kind or "", {}), algo)


def _changed(table: dict[str, Any], algo: str) -> dict[str, Any]:
    """`table` with `algo`'s UNTUNED_CHANGES to the keys it sets."""
    return {name: UNTUNED_CHANGES.get(algo, {}).get(name, value) for name, value in table.items()}


def with_untuned_defaults(settings: dict) -> dict:
    """`settings` over the untuned defaults of the env they name (the declared `env_name` default
    when they name none). A config that gives every such key already is returned as it is,
    without looking at the env (a run's config.yaml, a checkpoint's)."""
    given = {KEY_ALIASES.get(str(name), str(name)): value for name, value in settings.items()}
    if "batch_size" in given:
        given.setdefault("num_steps", None)
    algo = str(given.get("algo", TrainConfig.algo)).strip().lower()
    tables = [UNTUNED_REPLAY_DEFAULTS[algo]] if algo in UNTUNED_REPLAY_DEFAULTS else UNTUNED_DEFAULTS.values()
    if all(name in given for table in tables for name in table):
        return settings
    return merge_settings(untuned_defaults(given.get("env_name", TrainConfig.env_name), algo), settings)


def action_kind(action_space: Any) -> str | None:
    """ "discrete" (a gymnasium Discrete), "continuous" (a Box), None for anything else."""
    return {"Discrete": "discrete", "Box": "continuous"}.get(type(action_space).__name__)


@functools.lru_cache(maxsize=64)
def action_kind_of_env(env_name: Any) -> str | None:
    """The kind of actions of a built-in game or a registered Gymnasium id, found by building one
    copy (cached). None for an entry point (`module:Class`: importing it needs the user's
    permission, which is checked later) and for a name or env that does not build (the error is
    reported when the run builds it)."""
    from envs import make_vec_env, resolve_env_name
    from envs.errors import EnvError
    from envs.registry import GYM_PREFIX

    if not isinstance(env_name, str):
        return None
    try:
        resolved = resolve_env_name(env_name)
    except EnvError:
        return None
    if ":" in resolved.removeprefix(GYM_PREFIX):
        return None
    try:
        env = make_vec_env(resolved, 1, "cpu", seed=0)
    except Exception:  # noqa: BLE001 - a missing extra (box2d, ale) or a broken env: no defaults, the run says why
        return None
    try:
        return action_kind(env.single_action_space)
    finally:
        env.close()


def untuned_defaults_markdown() -> str:
    """`UNTUNED_DEFAULTS`, `UNTUNED_CHANGES` and `UNTUNED_REPLAY_DEFAULTS` as a Markdown table, for the docs."""
    lines = ["| algorithm, actions | settings (every other key: its declared default) |", "|---|---|"]
    for kind, table in UNTUNED_DEFAULTS.items():
        changing = [algo for algo in UNTUNED_CHANGES if _changed(table, algo) != table]
        same = " / ".join(["ppo", *(algo for algo in UNTUNED_CHANGES if algo not in changing)])
        lines.append(f"| {same}, {ACTION_KINDS[kind]} | {_settings_markdown(table) or 'the declared defaults'} |")
        for algo in changing:
            changes = {name: value for name, value in _changed(table, algo).items() if value != table[name]}
            lines.append(f"| {algo}, {ACTION_KINDS[kind]} | ppo's, but {_settings_markdown(changes)} |")
    for algo, table in UNTUNED_REPLAY_DEFAULTS.items():
        lines.append(f"| {algo}, any env | {_settings_markdown(table)} |")
    return "\n".join(lines)


def _settings_markdown(table: dict[str, Any]) -> str:
    return ", ".join(f"`{name}` {markdown_value(value)}" for name, value in table.items())


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML file (or start from the defaults when `path` is None), apply `key=value`
    overrides (dotted keys reach into `checkpoint`), validate, and return a complete config.
    Keys neither gives take the env's action-space defaults (`trainer.config.defaults.untuned_defaults`),
    then the declared ones."""
    raw = read_yaml_mapping(path) if path is not None else {}
    settings = merge_settings(raw, dict(parse_override(text) for text in overrides or []))
    return config_from_dict(with_untuned_defaults(settings))


def shipped_config_file(given: str | Path | None) -> str | Path | None:
    """`--config cartpole.yaml` from any folder: a bare file name that is not in the current
    folder but is one of the shipped configs (configs/*.yaml, installed with the package) means
    that one. The name is looked up in the folder's listing, never joined into a path."""
    if given is None or Path(given).exists() or Path(given).name != str(given):
        return given
    shipped = {path.name: path for path in CONFIGS_DIR.glob("*.yaml")} if CONFIGS_DIR.is_dir() else {}
    return shipped.get(str(given), given)
