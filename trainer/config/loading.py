"""Loading a config's settings: a YAML file, `--set key=value` overrides, and the one rule for
putting settings on top of a config (`merge_settings`: `--set`, the studio and the Python API).
The keys themselves are declared in trainer/config/keys.py; validation.py checks the result.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trainer.config.algorithm_keys import keys_other_algorithms_take
from trainer.config.checks import ConfigError, short_repr
from trainer.config.declaring import dataclass_sections
from trainer.config.keys import KEY_ALIASES, TrainConfig
from trainer.config.safe_yaml import YamlError, dump_yaml, load_yaml_file, load_yaml_text

# A value given on top of a config drops these keys from it: they were derived from the old value
# (e.g. --set num_envs=256 on a run's config.yaml, whose batch_size is now stale).
DERIVED_FROM = {
    "num_envs": ("batch_size", "num_minibatches"),
    "num_steps": ("batch_size", "num_minibatches"),
    "batch_size": ("num_steps", "num_minibatches"),
    "mini_batch_size": ("num_minibatches",),
    "num_minibatches": ("mini_batch_size",),
}


def merge_settings(base: dict, settings: dict) -> dict:
    """`base` (a raw or complete config dict) with `settings` on top: dotted keys reach into
    sections, aliases replace their key, and keys derived from a replaced one are dropped. The one
    rule for overrides, used by `--set`, the studio and the Python API. A new `algo` drops the
    old algorithm's keys that the new one does not take (`--set algo=x` on a PPO config)."""
    if not isinstance(settings, dict):
        raise ConfigError(f"settings must be a mapping of config keys to values, got {short_repr(settings)}")
    merged = copy.deepcopy(base)
    given = {KEY_ALIASES.get(str(name), str(name)) for name in settings}
    new_algo = next(
        (
            str(value).strip().lower()
            for name, value in settings.items()
            if KEY_ALIASES.get(str(name), str(name)) == "algo"
        ),
        None,
    )
    foreign = keys_other_algorithms_take(new_algo) if new_algo else set()
    for name in list(merged):
        canonical = KEY_ALIASES.get(name, name)
        if canonical in given and name != canonical:
            merged.pop(name)  # `max_steps` in the file, `total_timesteps` given: the given one wins
        if (
            any(canonical in DERIVED_FROM.get(setting, ()) for setting in given) or canonical in foreign
        ) and canonical not in given:
            merged.pop(name, None)
    for name, value in settings.items():
        name = KEY_ALIASES.get(str(name), str(name))
        if name in dataclass_sections() and isinstance(value, dict):
            section = merged.get(name) if isinstance(merged.get(name), dict) else {}
            merged[name] = {**section, **value}
        else:
            _set_dotted(merged, name, value)
    return merged


def read_yaml_mapping(path: str | Path) -> dict:
    try:
        return load_yaml_file(path)
    except YamlError as error:
        raise ConfigError(str(error)) from None


def parse_override(text: str, flag: str = "--set", example: str = "learning_rate=1e-3") -> tuple[str, Any]:
    """'learning_rate=1e-3' -> ('learning_rate', 0.001); the value is read as YAML. flag / example:
    the command-line option it came from, for the messages."""
    if "=" not in text:
        raise ConfigError(f"{flag} expects key=value (e.g. {flag} {example}), got {short_repr(text)}")
    name, _, value_text = text.partition("=")
    name = name.strip()
    if not name:
        raise ConfigError(f"{flag} expects key=value, the key is empty in {short_repr(text)}")
    try:
        value = load_yaml_text(value_text, f"{flag} {name}", mapping=False) if value_text.strip() else None
    except YamlError as error:
        if "alias" in str(error) or "nested" in str(error) or "too large" in str(error):
            raise ConfigError(str(error)) from None
        value = value_text
    return name, value


def _set_dotted(raw: dict, name: str, value: Any) -> None:
    parts = name.split(".")
    target = raw
    for part in parts[:-1]:
        existing = target.get(part)
        if not isinstance(existing, dict):
            existing = {}
            target[part] = existing
        target = existing
    target[parts[-1]] = value


def to_yaml(config: TrainConfig) -> str:
    return dump_yaml(config.to_dict())
