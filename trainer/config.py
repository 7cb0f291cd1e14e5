"""Training configuration: one `TrainConfig`, loaded from YAML, overridden from the command line,
validated once with errors a person can act on.

    from trainer.config import load_config
    config = load_config("configs/cartpole.yaml", overrides=["learning_rate=1e-3"])

Batch vocabulary (the same in the README and in the error messages):

    batch_size       samples collected per update  = num_envs x num_steps
    mini_batch_size  samples per gradient step; an update makes
                     update_epochs x (batch_size / mini_batch_size) gradient steps

Give `num_steps` or `batch_size` (the other is derived), or both if they agree.
Every field's help text below is the config reference; `docs/readme/trainer.md` is built from it.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_TYPES = {
    "ppo-small": "MLP, two hidden layers of 64 (actor and critic each)",
    "ppo-medium": "MLP, two hidden layers of 256",
    "ppo-large": "MLP, three hidden layers of 512, 512, 256",
    "ppo-cnn": "convolutional torso for image or grid observations, then 512 units",
}
ALGORITHMS = ("ppo", "a2c")
LR_SCALING_RULES = ("none", "sqrt", "linear")
DISTRIBUTED_BACKENDS = ("auto", "gloo", "nccl")
DEFAULT_NUM_STEPS = 128
DEFAULT_MINI_BATCH_SIZE = 256

# Words that mark a language / vision foundation model rather than an RL policy network.
_LANGUAGE_MODEL_WORDS = re.compile(
    r"qwen|llama|gpt|mistral|mixtral|gemma|phi-?\d|falcon|bert|t5|bloom|opt-|deepseek|claude|"
    r"vicuna|olmo|\d+(\.\d+)?b\b|instruct|chat",
    re.IGNORECASE,
)


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


def _help(text: str, **extra: Any) -> dict:
    return {"help": text, **extra}


@dataclass
class CheckpointConfig:
    interval: int = field(default=50, metadata=_help(
        "Save a checkpoint every this many updates (0: only when the run ends or is stopped)."))
    path: str | None = field(default=None, metadata=_help(
        "Folder for checkpoints; relative paths are inside the run directory. "
        "Default: `<run_dir>/checkpoints`."))
    keep: int = field(default=3, metadata=_help("Keep the last this many checkpoints (older ones are deleted)."))


@dataclass
class TrainConfig:
    # --- what to train --------------------------------------------------------------------
    env_name: str = field(default="cartpole", metadata=_help(
        "Environment: `cartpole`, `flappy_bird`, `snake` (or aliases such as `CartPole-v1`, "
        "`FlappyBirdPygame-v0`), any Gymnasium id (`Acrobot-v1`) or `package.module:Class`."))
    env_kwargs: dict = field(default_factory=dict, metadata=_help(
        "Options passed to the environment, e.g. `{grid_size: 12}` for snake."))
    wrappers: list = field(default_factory=list, metadata=_help(
        "Gymnasium wrappers `package.module:WrapperClass` applied to every env "
        "(built-ins then run through the Gymnasium adapter)."))
    model_type: str = field(default="ppo-small", metadata=_help(
        "Policy network: " + "; ".join(f"`{name}` {text}" for name, text in MODEL_TYPES.items()) + "."))
    algo: str = field(default="ppo", metadata=_help(
        "`ppo` (clipped surrogate, several epochs) or `a2c` (one unclipped pass per rollout)."))
    seed: int = field(default=1, metadata=_help(
        "Seeds the envs, the network initialisation and the action sampling: same seed, same run (on CPU)."))
    device: str = field(default="auto", metadata=_help(
        "`auto` (CUDA when available, else CPU), `cpu`, `cuda` or `cuda:N`."))
    total_timesteps: int = field(default=1_000_000, metadata=_help(
        "Environment steps to train for, summed over all envs (alias: `max_steps`). "
        "Rounded up to a whole number of updates."))
    # --- how much data per update ---------------------------------------------------------
    num_envs: int = field(default=64, metadata=_help(
        "Environments stepped in parallel (per process when distributed)."))
    num_steps: int | None = field(default=None, metadata=_help(
        f"Steps collected from every env per update (rollout length). Default: derived from "
        f"`batch_size`, else {DEFAULT_NUM_STEPS}."))
    batch_size: int | None = field(default=None, metadata=_help(
        "Samples per update = `num_envs x num_steps`. Give this or `num_steps`; the other is derived."))
    mini_batch_size: int | None = field(default=None, metadata=_help(
        f"Samples per gradient step; must divide `batch_size`. Default: {DEFAULT_MINI_BATCH_SIZE} "
        f"(or the largest divisor of `batch_size` below it); `a2c`: the whole batch."))
    num_minibatches: int | None = field(default=None, metadata=_help(
        "CleanRL's way to say the same thing: `mini_batch_size = batch_size / num_minibatches`."))
    update_epochs: int = field(default=4, metadata=_help(
        "Passes over each batch per update (`a2c`: always 1)."))
    # --- PPO ---------------------------------------------------------------------------------
    learning_rate: float = field(default=2.5e-4, metadata=_help("Adam step size (before `lr_scaling`)."))
    anneal_lr: bool = field(default=True, metadata=_help(
        "Decay the learning rate linearly to 0 over the run."))
    lr_scaling: str = field(default="none", metadata=_help(
        "`sqrt`: learning rate x sqrt(samples per gradient step / `lr_reference_batch`) (the guides' rule "
        "of thumb for bigger batches); `linear`: x the ratio; `none`: as given. Samples per gradient step "
        "= `mini_batch_size` x number of processes."))
    lr_reference_batch: int = field(default=256, metadata=_help(
        "The samples per gradient step that `learning_rate` was tuned for (used by `lr_scaling`)."))
    gamma: float = field(default=0.99, metadata=_help("Discount factor."))
    gae_lambda: float = field(default=0.95, metadata=_help("GAE lambda (0: one-step TD, 1: Monte Carlo)."))
    clip_coef: float = field(default=0.2, metadata=_help("PPO clipping range of the probability ratio."))
    clip_vloss: bool = field(default=False, metadata=_help(
        "Clip the value update to `clip_coef` around the old values as well."))
    norm_adv: bool = field(default=True, metadata=_help("Normalise advantages per minibatch."))
    ent_coef: float = field(default=0.01, metadata=_help("Weight of the entropy bonus."))
    vf_coef: float = field(default=0.5, metadata=_help("Weight of the value loss."))
    max_grad_norm: float = field(default=0.5, metadata=_help("Clip the gradient's global norm to this."))
    target_kl: float | None = field(default=None, metadata=_help(
        "Stop an update's remaining epochs once the approximate KL divergence exceeds this (null: never)."))
    norm_obs: bool = field(default=False, metadata=_help(
        "Normalise observations with running mean / std (saved in the model)."))
    norm_reward: bool = field(default=False, metadata=_help(
        "Scale rewards by the running std of the discounted return."))
    use_per: bool = field(default=False, metadata=_help(
        "Prioritised minibatches: sample in proportion to abs(advantage)^`per_alpha`, importance weights "
        "(`per_beta`) on the value loss."))
    per_alpha: float = field(default=0.6, metadata=_help("How strongly `use_per` prefers large errors (0: uniform)."))
    per_beta: float = field(default=0.4, metadata=_help("Importance-sampling correction of `use_per` (1: full)."))
    # --- where and how it runs -------------------------------------------------------------
    vector_env: bool | str | None = field(default=None, metadata=_help(
        "Gymnasium envs only: `sync`, `async` or true (async when `num_workers` > 1). Built-in games "
        "are already batched tensor envs and ignore it."))
    num_workers: int | None = field(default=None, metadata=_help(
        "Gymnasium envs only: worker processes of the async vector env."))
    torch_threads: int = field(default=0, metadata=_help(
        "CPU threads for torch (0: auto = 1 for MLPs, all cores for `ppo-cnn`)."))
    backend: str = field(default="auto", metadata=_help(
        "torch.distributed backend under torchrun: `auto` (nccl on CUDA, gloo on CPU), `gloo`, `nccl`."))
    gpu_ids: list | None = field(default=None, metadata=_help(
        "CUDA devices to use, e.g. `[0, 1]`; under torchrun, local rank i uses `gpu_ids[i]`."))
    # --- what it writes --------------------------------------------------------------------
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig, metadata=_help(
        "`interval` (updates), `path` (folder), `keep` (how many); see below."))
    gif_interval: int = field(default=50, metadata=_help(
        "Record a rollout GIF every this many updates, and one at the end (0: never)."))
    gif_max_frames: int = field(default=300, metadata=_help("Longest GIF, in frames (the episode is cut)."))
    gif_time_fraction: float = field(default=0.05, metadata=_help(
        "Skip a scheduled GIF when GIFs would take more than this fraction of the training time "
        "(1: never skip)."))
    log_interval: int = field(default=10, metadata=_help(
        "Write a `[STEP n] ...` log line every this many updates (metrics events go out every update)."))
    tensorboard: bool = field(default=False, metadata=_help(
        "Also write TensorBoard scalars to `<run_dir>/tensorboard` (needs the tensorboard package)."))

    def to_dict(self) -> dict:
        """Every key, nested `checkpoint`, JSON/YAML-safe."""
        return dataclasses.asdict(self)


KEY_ALIASES = {"max_steps": "total_timesteps", "n_envs": "num_envs", "n_steps": "num_steps",
               "n_epochs": "update_epochs", "lr": "learning_rate", "env": "env_name", "env_id": "env_name"}


def field_names(cls: type = TrainConfig) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def config_reference() -> list[tuple[str, Any, str]]:
    """(key, default, meaning) for every key, in declaration order (the README table)."""
    rows = []
    for item in dataclasses.fields(TrainConfig):
        if item.name == "checkpoint":
            for sub in dataclasses.fields(CheckpointConfig):
                rows.append((f"checkpoint.{sub.name}", sub.default, sub.metadata["help"]))
            continue
        default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        rows.append((item.name, default, item.metadata["help"]))
    return rows


# ---------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML file (or start from the defaults when `path` is None), apply `key=value`
    overrides (dotted keys reach into `checkpoint`), validate, and return a complete config."""
    raw: dict = {}
    if path is not None:
        raw = read_yaml_mapping(path)
    parsed = [parse_override(override) for override in overrides or []]
    overridden = {KEY_ALIASES.get(key, key) for key, _ in parsed}
    for key, makes_way in _MAKE_WAY_FOR.items():
        if key in overridden:  # e.g. --set num_envs=256 on a run's config.yaml: its batch_size is stale
            for stale in makes_way:
                if stale not in overridden:
                    raw.pop(stale, None)
    for key, value in parsed:
        _set_dotted(raw, key, value)
    return config_from_dict(raw)


# An override of the key on the left drops these values from the file (they were derived from it).
_MAKE_WAY_FOR = {
    "num_envs": ("batch_size", "num_minibatches"),
    "num_steps": ("batch_size", "num_minibatches"),
    "batch_size": ("num_steps", "num_minibatches"),
    "mini_batch_size": ("num_minibatches",),
    "num_minibatches": ("mini_batch_size",),
}


def read_yaml_mapping(path: str | Path) -> dict:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist (give a path to a .yaml file, "
                          f"e.g. configs/cartpole.yaml)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from error
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping of `key: value` lines, got a {type(raw).__name__}")
    return raw


def parse_override(text: str) -> tuple[str, Any]:
    """'learning_rate=1e-3' -> ('learning_rate', 0.001); the value is read as YAML."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"--set expects key=value (e.g. --set learning_rate=1e-3), got {text!r}")
    key, _, value_text = text.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"--set expects key=value, the key is empty in {text!r}")
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else None
    except yaml.YAMLError:
        value = value_text
    return key, value


def _set_dotted(raw: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    target = raw
    for part in parts[:-1]:
        existing = target.get(part)
        if not isinstance(existing, dict):
            existing = {}
            target[part] = existing
        target = existing
    target[parts[-1]] = value


def config_from_dict(raw: dict | TrainConfig) -> TrainConfig:
    """Validate a plain dict (from YAML, the studio's form or a checkpoint) into a TrainConfig
    with every derived value filled in. Raises ConfigError listing every problem found."""
    if isinstance(raw, TrainConfig):
        raw = raw.to_dict()
    if not isinstance(raw, dict):
        raise ConfigError(f"a config must be a mapping of keys to values, got {type(raw).__name__}")
    problems: list[str] = []
    values, given = _known_keys(raw, problems)
    config = TrainConfig()
    for key, value in values.items():
        if key == "checkpoint":
            continue
        checker = _CHECKERS[key]
        try:
            setattr(config, key, checker(key, value))
        except ConfigError as error:
            problems.append(str(error))
    config.checkpoint = _checkpoint_section(values.get("checkpoint"), problems)
    if not problems:
        _check_semantics(config, given, problems)
    if problems:
        if len(problems) == 1:
            raise ConfigError(problems[0])
        raise ConfigError("the config has {} problems:\n  - {}".format(len(problems), "\n  - ".join(problems)))
    return config


def _known_keys(raw: dict, problems: list[str]) -> tuple[dict, set[str]]:
    valid = field_names()
    values: dict = {}
    source: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            problems.append(f"config keys must be names, got {key!r}")
            continue
        name = KEY_ALIASES.get(key, key)
        if name not in valid:
            problems.append(_unknown_key_message(key, valid))
            continue
        if name in values:
            other = source[name]
            problems.append(f"{key!r} and {other!r} are two names for {name!r}; give only one of them")
            continue
        values[name] = value
        source[name] = key
    return values, set(values)


def _unknown_key_message(key: str, valid: list[str]) -> str:
    candidates = valid + list(KEY_ALIASES)
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not close:
        close = [c for c in candidates if key.lower() in c or c in key.lower()][:1]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown config key {key!r}.{hint} Valid keys: {', '.join(valid)} (see docs/readme/trainer.md)"


# ---------------------------------------------------------------------------------------------
# Value checkers: each returns the cleaned value or raises ConfigError naming key, value, rule.


def _number_from_text(value: Any) -> Any:
    # YAML 1.1 (PyYAML) reads `1e-3` and `2e6` as strings; `2_000_000` is already an int.
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return value
    return value


def _integer(key: str, value: Any, minimum: int | None = 1, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    value = _number_from_text(value)
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{key} must be {kind}{' or null' if allow_none else ''}, got {value!r}")
    if minimum is not None and value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{key} must be {kind}, got {value}")
    return value


def _real(key: str, value: Any, low: float | None = None, high: float | None = None,
          low_open: bool = False, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    value = _number_from_text(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key} must be a number{' or null' if allow_none else ''}, got {value!r}")
    value = float(value)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        left = "(" if low_open else "["
        rule = f"in {left}{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        raise ConfigError(f"{key} must be {rule}, got {value}")
    return value


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "on", "off", "1", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{key} must be true or false, got {value!r}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    close = difflib.get_close_matches(str(value).lower(), choices, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}.{hint}")


def _model_type(key: str, value: Any) -> str:
    names = list(MODEL_TYPES)
    listing = "; ".join(f"{name} ({text})" for name, text in MODEL_TYPES.items())
    if isinstance(value, str) and value.strip().lower() in MODEL_TYPES:
        return value.strip().lower()
    if isinstance(value, str) and _LANGUAGE_MODEL_WORDS.search(value):
        raise ConfigError(
            f"model_type {value!r} looks like a language model; language models are not policies here. "
            f"The policy is a small network trained from scratch on the game's observations. "
            f"model_type must be one of: {listing}")
    close = difflib.get_close_matches(str(value).lower(), names, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown model_type {value!r}.{hint} model_type must be one of: {listing}")


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _device(key: str, value: Any) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    if text in ("gpu", "cuda:gpu", "nvidia"):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {value!r}. Did you mean 'cuda'?")
    if not isinstance(text, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", text):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {value!r}")
    if text.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {text!r} asked for, but this machine has no usable CUDA GPU "
                f"(torch.cuda.is_available() is False). Use device: auto (the GPU when there is one, "
                f"else the CPU) or device: cpu")
        index = int(text.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device {text!r} does not exist: this machine has {torch.cuda.device_count()} "
                              f"CUDA device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return text


def _mapping(key: str, value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{key} must be a mapping of option names to values, got {value!r}")
    return dict(value)


def _wrappers(key: str, value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and ":" in item for item in value):
        raise ConfigError(f"wrappers must be a list of entry points 'package.module:WrapperClass', got {value!r}")
    return list(value)


def _vector_env(key: str, value: Any) -> bool | str | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("sync", "async"):
        return value.strip().lower()
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"vector_env must be true, false, sync, async or null, got {value!r}")


def _gpu_ids(key: str, value: Any) -> list | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part]
        try:
            value = [int(part) for part in value]
        except ValueError:
            pass
    if not isinstance(value, (list, tuple)) or not value or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise ConfigError(f"gpu_ids must be a list of CUDA device numbers such as [0, 1], got {value!r}")
    return list(value)


_CHECKERS = {
    "env_name": _text,
    "env_kwargs": _mapping,
    "wrappers": _wrappers,
    "model_type": _model_type,
    "algo": lambda k, v: _choice(k, v, ALGORITHMS),
    "seed": lambda k, v: _integer(k, v, minimum=0),
    "device": _device,
    "total_timesteps": lambda k, v: _integer(k, v),
    "num_envs": lambda k, v: _integer(k, v),
    "num_steps": lambda k, v: _integer(k, v, allow_none=True),
    "batch_size": lambda k, v: _integer(k, v, allow_none=True),
    "mini_batch_size": lambda k, v: _integer(k, v, allow_none=True),
    "num_minibatches": lambda k, v: _integer(k, v, allow_none=True),
    "update_epochs": lambda k, v: _integer(k, v),
    "learning_rate": lambda k, v: _real(k, v, 0.0, 1.0, low_open=True),
    "anneal_lr": _boolean,
    "lr_scaling": lambda k, v: _choice(k, "none" if v is None or v is False else v, LR_SCALING_RULES),
    "lr_reference_batch": lambda k, v: _integer(k, v),
    "gamma": lambda k, v: _real(k, v, 0.0, 1.0),
    "gae_lambda": lambda k, v: _real(k, v, 0.0, 1.0),
    "clip_coef": lambda k, v: _real(k, v, 0.0, None, low_open=True),
    "clip_vloss": _boolean,
    "norm_adv": _boolean,
    "ent_coef": lambda k, v: _real(k, v, 0.0),
    "vf_coef": lambda k, v: _real(k, v, 0.0),
    "max_grad_norm": lambda k, v: _real(k, v, 0.0, None, low_open=True),
    "target_kl": lambda k, v: _real(k, v, 0.0, None, low_open=True, allow_none=True),
    "norm_obs": _boolean,
    "norm_reward": _boolean,
    "use_per": _boolean,
    "per_alpha": lambda k, v: _real(k, v, 0.0),
    "per_beta": lambda k, v: _real(k, v, 0.0, 1.0),
    "vector_env": _vector_env,
    "num_workers": lambda k, v: _integer(k, v, allow_none=True),
    "torch_threads": lambda k, v: _integer(k, v, minimum=0),
    "backend": lambda k, v: _choice(k, v, DISTRIBUTED_BACKENDS),
    "gpu_ids": _gpu_ids,
    "gif_interval": lambda k, v: _integer(k, 0 if v is None else v, minimum=0),
    "gif_max_frames": lambda k, v: _integer(k, v),
    "gif_time_fraction": lambda k, v: _real(k, v, 0.0, 1.0),
    "log_interval": lambda k, v: _integer(k, v),
    "tensorboard": _boolean,
}
assert set(_CHECKERS) == set(field_names()) - {"checkpoint"}, "every TrainConfig key needs a checker"


def _checkpoint_section(value: Any, problems: list[str]) -> CheckpointConfig:
    section = CheckpointConfig()
    if value is None:
        return section
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        value = {"interval": value}  # `checkpoint: 100` reads as the interval
    if not isinstance(value, dict):
        problems.append(f"checkpoint must be a mapping with interval, path and keep, got {value!r}")
        return section
    valid = field_names(CheckpointConfig)
    for key, item in value.items():
        try:
            if key == "interval":
                section.interval = _integer("checkpoint.interval", item, minimum=0)
            elif key == "keep":
                section.keep = _integer("checkpoint.keep", item)
            elif key == "path":
                section.path = None if item is None else _text("checkpoint.path", str(item))
            else:
                close = difflib.get_close_matches(str(key), valid, n=1)
                hint = f" Did you mean 'checkpoint.{close[0]}'?" if close else ""
                problems.append(f"unknown key 'checkpoint.{key}'.{hint} The checkpoint section takes: "
                                f"{', '.join(valid)}")
        except ConfigError as error:
            problems.append(str(error))
    return section


# ---------------------------------------------------------------------------------------------
# Relations between keys: batch sizes, algorithm, env name


def _divisors_near(number: int, target: int) -> list[int]:
    """The divisors of `number` just below and just above `target`."""
    divisors = [d for d in range(1, number + 1) if number % d == 0]
    below = [d for d in divisors if d < target]
    above = [d for d in divisors if d > target]
    return below[-1:] + above[:1]


def _check_semantics(config: TrainConfig, given: set[str], problems: list[str]) -> None:
    _resolve_batch_sizes(config, given, problems)
    if config.algo == "a2c" and "update_epochs" in given and config.update_epochs != 1:
        problems.append(f"algo a2c makes one pass over each rollout, but update_epochs is {config.update_epochs}; "
                        f"remove update_epochs (or set it to 1), or use algo: ppo for several epochs")
    if config.algo == "a2c":
        config.update_epochs = 1
    try:
        from envs import resolve_env_name
        from envs.base import EnvError
    except ImportError:  # envs/ missing: the run will fail later with its own message
        return
    try:
        resolve_env_name(config.env_name)
    except EnvError as error:
        problems.append(f"env_name: {error}")


def _resolve_batch_sizes(config: TrainConfig, given: set[str], problems: list[str]) -> None:
    num_envs = config.num_envs
    if config.num_steps is not None and config.batch_size is not None:
        if config.num_steps * num_envs != config.batch_size:
            problems.append(
                f"batch_size ({config.batch_size}) must equal num_envs x num_steps "
                f"({num_envs} x {config.num_steps} = {num_envs * config.num_steps}). "
                f"batch_size is the number of samples per update; give only one of num_steps and "
                f"batch_size (the other is derived), or make them agree")
            return
    elif config.batch_size is not None:
        if config.batch_size % num_envs:
            lower = max(num_envs, config.batch_size // num_envs * num_envs)
            problems.append(
                f"batch_size ({config.batch_size}) must be a multiple of num_envs ({num_envs}): each update "
                f"collects num_steps steps from every env. Use batch_size {lower} or {lower + num_envs}, "
                f"or set num_steps instead")
            return
        config.num_steps = config.batch_size // num_envs
    else:
        if config.num_steps is None:
            config.num_steps = DEFAULT_NUM_STEPS
        config.batch_size = config.num_steps * num_envs
    batch_size = config.batch_size
    if config.mini_batch_size is not None and config.num_minibatches is not None:
        if config.mini_batch_size * config.num_minibatches != batch_size:
            problems.append(
                f"mini_batch_size ({config.mini_batch_size}) x num_minibatches ({config.num_minibatches}) must "
                f"equal batch_size ({batch_size}); give only one of mini_batch_size and num_minibatches")
            return
    elif config.num_minibatches is not None:
        if config.num_minibatches > batch_size or batch_size % config.num_minibatches:
            choices = _divisors_near(batch_size, config.num_minibatches)
            problems.append(
                f"num_minibatches ({config.num_minibatches}) must divide batch_size ({batch_size}) evenly; "
                f"values that do: {', '.join(map(str, choices))}")
            return
        config.mini_batch_size = batch_size // config.num_minibatches
    elif config.mini_batch_size is None:
        if config.algo == "a2c":
            config.mini_batch_size = batch_size
        else:
            config.mini_batch_size = max(d for d in range(1, min(DEFAULT_MINI_BATCH_SIZE, batch_size) + 1)
                                         if batch_size % d == 0)
    mini = config.mini_batch_size
    if mini > batch_size:
        problems.append(
            f"mini_batch_size ({mini}) is larger than batch_size ({batch_size} = num_envs {num_envs} x "
            f"num_steps {config.num_steps}); mini_batch_size is the samples per gradient step, taken from "
            f"the batch of one update. Lower mini_batch_size or raise num_envs / num_steps")
        return
    if batch_size % mini:
        choices = _divisors_near(batch_size, mini)
        problems.append(
            f"mini_batch_size ({mini}) must divide batch_size ({batch_size} = num_envs {num_envs} x num_steps "
            f"{config.num_steps}) evenly; nearby values that do: {', '.join(map(str, choices))}")
        return
    config.num_minibatches = batch_size // mini


def to_yaml(config: TrainConfig) -> str:
    import yaml

    return yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)


def reference_markdown() -> str:
    """The config reference as a Markdown table (key, default, meaning), for the README.

    `python -c "from trainer.config import reference_markdown; print(reference_markdown())"`"""
    def show(value: Any) -> str:
        if value is None:
            return "`null`"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        if isinstance(value, int) and value >= 10_000:
            return f"`{value:_}`"
        return f"`{value}`"

    lines = ["| key | default | meaning |", "|---|---|---|"]
    for key, default, meaning in config_reference():
        lines.append(f"| `{key}` | {show(default)} | {meaning.replace('|', '/')} |")
    return "\n".join(lines)
