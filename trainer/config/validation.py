"""Validation: one function, `config_from_dict`, for a dict, a YAML file's contents and a
TrainConfig built in Python. Each key is checked by its declaration (trainer/config/keys.py), then
the relations between keys: batch sizes (batching.py), the algorithm's own (its check in
ALGORITHM_TABLE), the env name. Every problem found is reported at once, as a ConfigError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.config.algorithm_keys import ALGORITHM_TABLE, actor_algorithms, algorithm_keys, settle_algorithm_keys
from trainer.config.batching import resolve_batch_sizes
from trainer.config.checks import ConfigError, did_you_mean, short_repr
from trainer.config.declaring import field_names
from trainer.config.keys import KEY_ALIASES, TrainConfig


def config_from_dict(raw: dict | TrainConfig) -> TrainConfig:
    """Validate a plain dict (from YAML, the studio's form, the API or a checkpoint) or a
    TrainConfig into a TrainConfig with every derived value filled in. Raises ConfigError listing
    every problem found."""
    if isinstance(raw, TrainConfig):
        raw = raw.to_dict()
    if not isinstance(raw, dict):
        raise ConfigError(f"a config must be a mapping of keys to values, got {type(raw).__name__}")
    problems: list[str] = []
    config = TrainConfig()
    algorithm_values: dict[str, Any] = {}
    given = _fill_section(config, raw, "", problems, algorithm_values)
    settle_algorithm_keys(config, algorithm_values, problems)
    if not problems:
        _check_semantics(config, given, problems)
    if problems:
        if len(problems) == 1:
            raise ConfigError(problems[0])
        raise ConfigError("the config has {} problems:\n  - {}".format(len(problems), "\n  - ".join(problems)))
    return config


def _fill_section(
    target: Any, raw: dict, prefix: str, problems: list[str], algorithm_values: dict | None = None
) -> set[str]:
    """Check every key of `raw` with its declaration and set it on `target` (an algorithm's own
    key into `algorithm_values`); returns the keys given."""
    fields = {item.name: item for item in dataclasses.fields(target) if "algo_settings" not in item.metadata}
    own_keys = algorithm_keys() if algorithm_values is not None else {}
    given: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            problems.append(f"config keys must be names, got {short_repr(name)}")
            continue
        canonical = KEY_ALIASES.get(name, name) if not prefix else name
        if canonical not in fields and canonical not in own_keys:
            problems.append(_unknown_key_message(prefix, name, list(fields) + list(own_keys)))
            continue
        if canonical in given:
            problems.append(f"{given[canonical]!r} and {name!r} are two names for {canonical!r}; give only one of them")
            continue
        given[canonical] = name
        if canonical in own_keys:
            try:
                algorithm_values[canonical] = own_keys[canonical].check(canonical, value)
            except ConfigError as error:
                problems.append(str(error))
            continue
        section = fields[canonical].metadata.get("section")
        if section is not None:
            setattr(target, canonical, _section(section, value, prefix + canonical, problems))
            continue
        try:
            setattr(target, canonical, fields[canonical].metadata["check"](prefix + canonical, value))
        except ConfigError as error:
            problems.append(str(error))
    return set(given)


def _section(cls: type, value: Any, name: str, problems: list[str]) -> Any:
    section = cls()
    if value is None:
        return section
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        value = {"interval": value}  # `checkpoint: 100` reads as the interval
    if not isinstance(value, dict):
        problems.append(f"{name} must be a mapping with {', '.join(field_names(cls))}, got {short_repr(value)}")
        return section
    _fill_section(section, value, name + ".", problems)
    return section


def _unknown_key_message(prefix: str, name: str, valid: list[str]) -> str:
    candidates = valid + ([] if prefix else list(KEY_ALIASES))
    hint = did_you_mean(name, candidates, prefix)  # `timesteps` -> total_timesteps; `lr_rate` -> nothing
    if prefix:
        return (
            f"unknown key {short_repr(prefix + name)}.{hint} The {prefix.rstrip('.')} section takes: {', '.join(valid)}"
        )
    return f"unknown config key {short_repr(name)}.{hint} Valid keys: {', '.join(valid)} (see docs/config.md)"


# ---------------------------------------------------------------------------------------------
# Relations between keys: batch sizes, the algorithm's own, env name


def _check_semantics(config: TrainConfig, given: set[str], problems: list[str]) -> None:
    entry = ALGORITHM_TABLE.get(config.algo)
    resolve_batch_sizes(config, problems, replay=entry is not None and entry.replay)
    if config.min_nodes > config.max_nodes:
        problems.append(
            f"min_nodes ({config.min_nodes}) is larger than max_nodes ({config.max_nodes}); give "
            f"min_nodes <= max_nodes (torchrun's --nnodes MIN:MAX)"
        )
    if config.local_actors and entry is not None and not entry.actors:
        problems.append(
            f"local_actors: algo {config.algo} learns from its own rollouts; actors feed algo "
            f"{', '.join(actor_algorithms())}. Set local_actors to 0, or pick one of those"
        )
    if config.local_actors and config.ranks_per_node() > 1:
        problems.append(
            f"local_actors ({config.local_actors}) and nproc_per_node ({config.ranks_per_node()}) are two ways to "
            f"use this machine's cores: actors and one learner, or synchronous ranks. Keep one of them"
        )
    if entry is not None and entry.check is not None:
        entry.check(config, given, problems)  # the relations between the algorithm's own keys
    if config.hidden_sizes and config.model_type == "ppo-cnn":
        problems.append(
            "hidden_sizes sets the layers of an MLP policy; model_type ppo-cnn has its own "
            "convolutional torso. Remove hidden_sizes or use an MLP model_type"
        )
    from envs import resolve_env_name
    from envs.errors import EnvError

    try:
        resolve_env_name(config.env_name)
    except EnvError as error:
        problems.append(f"env_name: {error}")
