"""The algorithms' own config keys, as the config sees them: `ALGORITHM_TABLE`, which the
algorithms fill when they register (trainer/algos/registry.py; `import trainer` registers the
built-in ones before any config is read). The config sits below the algorithms and never imports
them, so it learns their names and keys here; trainer/config/validation.py validates with the table.
`AlgorithmSettings`: how a TrainConfig holds its algorithm's keys (`config.clip_coef`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.config.checks import Check, ConfigError, did_you_mean, short_repr

# check(config, the keys given, problems): the relations between an algorithm's own keys
ConfigCheck = Callable[[Any, set[str], list[str]], None]


@dataclass(frozen=True)
class AlgorithmEntry:
    """What the config knows of an algorithm: its `algo` name, one line about it, its own keys
    (`DeclaredKey`s of trainer/config/declaring.py) and the check of their relations."""

    name: str
    summary: str
    keys: tuple[Any, ...] = ()
    check: ConfigCheck | None = None
    replay: bool = False  # samples minibatches from a replay buffer (trainer/config/batching.py)
    actions: str | None = None  # "discrete" or "continuous" when it takes only that kind (checked at preflight)
    actors: bool = False  # learns from actors' batches (its update metrics report their queue: `local_actors` works)


ALGORITHM_TABLE: dict[str, AlgorithmEntry] = {}


def actor_algorithms() -> list[str]:
    """The algorithms that learn from actors' batches (`--actors`, `local_actors`), by name."""
    return [name for name, entry in ALGORITHM_TABLE.items() if entry.actors]


def add_algorithm(entry: AlgorithmEntry, shared_keys: set[str]) -> None:
    """Put `entry` in the table. Its keys may not take a shared key's name (`gamma`); a key of
    several algorithms (PPO's, A2C's) must be declared once, the same for all."""
    for declared in entry.keys:
        if declared.name in shared_keys:
            raise ValueError(
                f"algorithm {entry.name!r} declares {declared.name!r}, a key every algorithm shares: "
                f"read config.{declared.name} instead of declaring it"
            )
        for other in ALGORITHM_TABLE.values():
            theirs = next((item for item in other.keys if item.name == declared.name), None)
            if theirs is not None and other.name != entry.name and theirs != declared:
                raise ValueError(
                    f"algorithm {entry.name!r} declares {declared.name!r} differently from algorithm "
                    f"{other.name!r}: share its declaration or use another name"
                )
    ALGORITHM_TABLE[entry.name] = entry


def forget_algorithm(name: str) -> None:
    ALGORITHM_TABLE.pop(name, None)


def algorithm_keys() -> dict[str, Any]:
    """Every registered algorithm's own keys by name, in registration order, each with `algos`."""
    found: dict[str, Any] = {}
    for entry in ALGORITHM_TABLE.values():
        for declared in entry.keys:
            if declared.name not in found:
                found[declared.name] = dataclasses.replace(declared, algos=tuple(algorithms_with_key(declared.name)))
    return found


def algorithms_with_key(name: str) -> list[str]:
    return [entry.name for entry in ALGORITHM_TABLE.values() if any(item.name == name for item in entry.keys)]


def keys_other_algorithms_take(algo: str) -> set[str]:
    """Keys of registered algorithms that `algo` does not take (none for a name not registered)."""
    if algo not in ALGORITHM_TABLE:
        return set()
    return set(algorithm_keys()) - {item.name for item in ALGORITHM_TABLE[algo].keys}


def settle_algorithm_keys(config: Any, values: dict[str, Any], problems: list[str]) -> None:
    """The chosen algorithm's keys into `config.algo_settings`: the given ones, else their
    defaults. A key only another algorithm takes is refused (it would silently do nothing)."""
    entry = ALGORITHM_TABLE.get(config.algo)
    if entry is None:
        return
    own = {item.name for item in entry.keys}
    for name in values:
        if name not in own:
            owners = ", ".join(algorithms_with_key(name))
            problems.append(
                f"{name} is a key of algo {owners}, but this config trains algo {config.algo}, which "
                f"does not read it: remove {name}, or set algo to {owners.split(', ')[0]}"
            )
    config.algo_settings = {
        item.name: values[item.name] if item.name in values else copy.deepcopy(item.default) for item in entry.keys
    }


class RegisteredAlgorithm(Check):
    """The `algo` key's check: one of the algorithms in ALGORITHM_TABLE when the value is checked
    (they register after the config is imported, so the choices are looked up, not stored)."""

    kind = "choice"

    def __init__(self) -> None:  # no fields of its own
        pass

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(ALGORITHM_TABLE)

    def clean(self, key: str, value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in ALGORITHM_TABLE:
            return value.strip().lower()
        hint = did_you_mean(value, self.choices)
        listing = "; ".join(f"{entry.name} ({entry.summary})" for entry in ALGORITHM_TABLE.values())
        raise ConfigError(
            f"{key} must be one of {', '.join(self.choices)}, got {short_repr(value)}.{hint} The algorithms: {listing}"
        )


class AlgorithmSettings:
    """What TrainConfig (trainer/config/keys.py) does with its `algo_settings` field, the chosen
    algorithm's own keys: they start at their declared defaults, are read and written as
    `config.clip_coef`, and are written flat right after `algo` by `to_dict`."""

    def __post_init__(self) -> None:
        """The algorithm's keys start at their declared defaults (a copy: `replace()` shares none)."""
        entry = ALGORITHM_TABLE.get(self.algo)
        declared = {item.name: copy.deepcopy(item.default) for item in entry.keys} if entry else {}
        self.algo_settings = {**declared, **self.algo_settings}

    def __getattr__(self, name: str) -> Any:
        """`config.clip_coef`: an algorithm key of this config (only called when no field has the name)."""
        settings = self.__dict__.get("algo_settings")
        if settings is not None and name in settings:
            return settings[name]
        owners = algorithms_with_key(name)
        raise AttributeError(
            f"TrainConfig has no key {name!r}"
            + (
                f" (a key of algo {', '.join(owners)}; this config trains {self.__dict__.get('algo')})"
                if owners
                else ""
            )
        )

    def __setattr__(self, name: str, value: Any) -> None:
        settings = self.__dict__.get("algo_settings")
        if settings is not None and name in settings:
            settings[name] = value
        else:
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict:
        """Every key (the algorithm's own right after `algo`), nested `checkpoint`, JSON/YAML-safe."""
        raw = dataclasses.asdict(self)
        settings = raw.pop("algo_settings")
        flat: dict = {}
        for name, value in raw.items():
            flat[name] = value
            if name == "algo":
                flat.update(settings)
        return flat
