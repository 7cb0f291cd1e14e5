"""The config's declarations read back: every key as a `DeclaredKey` (the config reference, the
studio form), the key names a config may give, the dataclass sections (`checkpoint`), and
`declare_algorithm`, which adds an algorithm's own keys to ALGORITHM_TABLE when it registers.
The declarations themselves (`key(...)`, `TrainConfig`) are in trainer/config/keys.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainer.config.algorithm_keys import AlgorithmEntry, ConfigCheck, add_algorithm, algorithm_keys
from trainer.config.checks import Check
from trainer.config.keys import KEY_ALIASES, TrainConfig


@dataclass(frozen=True)
class DeclaredKey:
    """One config key as declared in keys.py; `name` is dotted inside a section (`checkpoint.keep`)."""

    name: str
    default: Any
    help: str
    check: Check
    group: str | None
    studio_note: str | None
    algos: tuple[str, ...] = ()  # an algorithm's own key: the algorithms that take it (empty: every one)


def declared_keys(cls: type = TrainConfig, prefix: str = "") -> list[DeclaredKey]:
    """Every key in declaration order, sections flattened, the registered algorithms' own keys
    right after `algo` (the config reference, the studio form)."""
    keys = []
    for item in dataclasses.fields(cls):
        section = item.metadata.get("section")
        if section is not None:
            keys += declared_keys(section, f"{prefix}{item.name}.")
            continue
        if "help" not in item.metadata:  # algo_settings (not a key), or a field an algorithm adds for itself
            continue
        default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        keys.append(
            DeclaredKey(
                prefix + item.name,
                default,
                item.metadata["help"],
                item.metadata["check"],
                item.metadata["group"],
                item.metadata["studio_note"],
            )
        )
        if cls is TrainConfig and item.name == "algo":
            keys += algorithm_keys().values()
    return keys


def field_names(cls: type = TrainConfig) -> list[str]:
    """The dataclass's keys (TrainConfig: the ones every algorithm shares; `key_names` adds the algorithms')."""
    return [item.name for item in dataclasses.fields(cls) if "algo_settings" not in item.metadata]


def key_names() -> list[str]:
    """Every top-level key a config may give: the shared ones and every registered algorithm's."""
    return field_names() + list(algorithm_keys())


def declare_algorithm(
    name: str,
    summary: str,
    keys: type | None = None,
    check: ConfigCheck | None = None,
    replay: bool = False,
    actions: str | None = None,
    actors: bool = False,
) -> None:
    """Add an algorithm and its own keys (a dataclass of `key(...)` fields) to ALGORITHM_TABLE
    (trainer/config/algorithm_keys.py), as trainer/algos/registry.py does when one registers."""
    own = tuple(declared_keys(keys)) if keys is not None else ()
    entry = AlgorithmEntry(name, summary, own, check, replay, actions, actors)
    add_algorithm(entry, set(field_names()) | set(KEY_ALIASES))


def dataclass_sections() -> dict[str, type]:
    return {
        item.name: item.metadata["section"] for item in dataclasses.fields(TrainConfig) if "section" in item.metadata
    }
