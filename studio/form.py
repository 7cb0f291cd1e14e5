"""The Train form as data: which config keys it shows, and conversions form <-> config <-> YAML.

`FORM_FIELDS` lists every `TrainConfig` key the web form edits, in display order; `NOT_IN_FORM`
names the others and why. A test checks the two together cover every TrainConfig key, so a
new trainer option cannot silently go missing from the studio. An algorithm's own keys (those of
the algorithms registered when this module is imported) are shown only while it is chosen
(`visible_fields`; a group of them, its title too: `visible_groups`), and only the chosen one's
go into the config.

Nothing here imports gradio: `studio.ui` turns each FormField into a component.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from trainer.config.checks import ConfigError
from trainer.config.declaring import DeclaredKey, declared_keys
from trainer.config.defaults import shipped_config
from trainer.config.keys import BASIC, STUDIO_GROUPS, TrainConfig
from trainer.config.loading import to_yaml
from trainer.config.permissions import CodePermissionError, require_code_permission
from trainer.config.safe_yaml import YamlError, load_yaml_text
from trainer.config.validation import config_from_dict
from trainer.run.layout import CHECKPOINTS_DIR

VECTOR_ENV_DEFAULT = "default"


@dataclass(frozen=True)
class FormField:
    """One config key as a form control, derived from its declaration in trainer/config/keys.py."""

    key: str  # TrainConfig key; "checkpoint.interval" reaches into the checkpoint section
    kind: str  # "int", "float", "bool", "choice", "text", "yaml"
    group: str  # "basic" or the title of its Advanced group
    help: str
    choices: tuple[str, ...] = ()
    optional: bool = False  # an empty box means "not set" (null)
    algos: tuple[str, ...] = ()  # an algorithm's own key: shown while one of these is chosen (empty: always)
    default: Any = None

    @property
    def basic(self) -> bool:
        return self.group == BASIC

    def shown_for(self, algo: Any) -> bool:
        return not self.algos or algo in self.algos

    @classmethod
    def of(cls, declared: DeclaredKey) -> FormField:
        check = declared.check
        choices = tuple(check.choices)
        if declared.name == "vector_env":
            choices = (VECTOR_ENV_DEFAULT, *choices)
        text = declared.help.replace("`", "")
        if check.optional and check.kind in ("int", "float"):
            text += " (0: not set)"
        return cls(
            declared.name, check.kind, declared.group, text, choices, check.optional, declared.algos, declared.default
        )


# The form shows the keys group by group, in the order STUDIO_GROUPS lists the groups.
FORM_FIELDS = tuple(
    sorted(
        (FormField.of(declared) for declared in declared_keys() if declared.group),
        key=lambda form_field: STUDIO_GROUPS.index(form_field.group),
    )
)
BASIC_FIELDS = tuple(form_field for form_field in FORM_FIELDS if form_field.basic)
ADVANCED_FIELDS = tuple(form_field for form_field in FORM_FIELDS if not form_field.basic)
NOT_IN_FORM = {declared.name: declared.studio_note for declared in declared_keys() if declared.studio_note}


def visible_fields(algo: Any) -> list[bool]:
    """Whether each FORM_FIELDS control shows while `algo` is chosen (the algorithm's own keys only for it)."""
    return [form_field.shown_for(algo) for form_field in FORM_FIELDS]


def advanced_groups() -> list[tuple[str, list[FormField]]]:
    """ADVANCED_FIELDS under their group titles, in STUDIO_GROUPS order."""
    return [(title, [f for f in ADVANCED_FIELDS if f.group == title]) for title in STUDIO_GROUPS[1:]]


def visible_groups(algo: Any) -> list[bool]:
    """Whether each advanced_groups() group shows while `algo` is chosen: while one of its fields
    does (the "DQN" group, title and all, only for dqn)."""
    return [any(form_field.shown_for(algo) for form_field in group) for _, group in advanced_groups()]


class FormError(ValueError):
    """A form value the studio refuses before the trainer sees it (message for people)."""


# ----------------------------------------------------------------------------- config -> form


def _get(config: dict, key: str) -> Any:
    section, _, name = key.rpartition(".")
    holder = config.get(section, {}) if section else config
    return holder.get(name) if isinstance(holder, dict) else None


def form_values(config: dict) -> list[Any]:
    """The value of every FORM_FIELDS control for a (validated) config dict."""
    values = []
    for form_field in FORM_FIELDS:
        value = _get(config, form_field.key)
        if form_field.algos and not form_field.shown_for(config.get("algo")):
            value = form_field.default  # another algorithm's key: its default, should that one be chosen
        if form_field.optional and form_field.kind in ("int", "float") and value is None:
            value = 0
        elif form_field.key == "vector_env":
            value = (
                VECTOR_ENV_DEFAULT
                if value is None
                else ("pool" if value is True else "sync" if value is False else value)
            )
        elif form_field.kind == "yaml":
            value = "" if not value else yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()
        values.append(value)
    return values


def tuned_config(env_name: str, algo: str = "ppo") -> dict:
    """The tuned config of `env_name` for `algo` (configs/<env>.yaml, configs/cartpole_dqn.yaml, ...),
    else the defaults for the env and the algorithm."""
    return shipped_config(env_name, {"algo": algo}).to_dict()


# ----------------------------------------------------------------------------- form -> config


def _parse_yaml_field(key: str, text: Any) -> Any:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if not isinstance(text, str):
        return text
    try:
        return load_yaml_text(text, key, mapping=False)
    except YamlError as error:
        raise FormError(
            f"{error}. Write a mapping like {{grid_size: 12}} or a list like [pkg.module:Wrapper]."
        ) from None


def raw_config_from_form(values: Sequence[Any]) -> dict:
    """Form control values (in FORM_FIELDS order) -> a raw config dict for `config_from_dict`; the
    keys of algorithms other than the chosen one (hidden) are left out."""
    if len(values) != len(FORM_FIELDS):
        raise FormError(f"expected {len(FORM_FIELDS)} form values, got {len(values)}")
    raw: dict = {}
    algo = dict(zip((form_field.key for form_field in FORM_FIELDS), values)).get("algo")
    algo = algo.strip().lower() if isinstance(algo, str) else algo
    for form_field, value in zip(FORM_FIELDS, values):
        if not form_field.shown_for(algo):
            continue
        if form_field.kind == "yaml":
            value = _parse_yaml_field(form_field.key, value)
        elif form_field.key == "vector_env" and value == VECTOR_ENV_DEFAULT:
            value = None
        elif isinstance(value, str):
            value = value.strip()
            if form_field.kind in ("int", "float") and value == "":
                value = None
        if form_field.optional and form_field.kind in ("int", "float") and value == 0:
            value = None  # a number box cannot be empty in the browser: 0 means "not set"
        empty = value is None or value == ""
        if empty and not form_field.optional and (form_field.basic or form_field.kind in ("int", "float")):
            raise FormError(f"{form_field.key} is empty: give it a value.")
        if isinstance(value, float) and form_field.kind == "int" and value.is_integer():
            value = int(value)
        section, _, name = form_field.key.rpartition(".")
        (raw.setdefault(section, {}) if section else raw)[name] = value
    return raw


def check_web_safety(raw: dict, allow_custom_envs: bool) -> None:
    """Refuse what would let a web visitor run code or write files on the server.

    A `package.module:Class` env or wrapper makes the trainer import that module: allowed only
    when the studio was started with --allow-custom-envs. Checkpoints always stay in the run
    folder.
    """
    try:
        require_code_permission(raw, allow_custom_envs, "This config", "`python app.py --allow-custom-envs`")
    except CodePermissionError as error:
        raise FormError(str(error)) from None
    checkpoint = raw.get("checkpoint")
    if isinstance(checkpoint, dict) and checkpoint.get("path") not in (None, "", CHECKPOINTS_DIR):
        raise FormError(
            "checkpoint.path cannot be set from the studio: checkpoints always go to the run "
            "folder's checkpoints/ (use the CLI for other locations)."
        )


def validated_config(values: Sequence[Any], allow_custom_envs: bool) -> TrainConfig:
    """Form values -> a validated TrainConfig; FormError / ConfigError with a readable message."""
    raw = raw_config_from_form(values)
    check_web_safety(raw, allow_custom_envs)
    return config_from_dict(raw)


def config_from_yaml_text(text: str) -> tuple[dict, list[str]]:
    """Pasted or uploaded YAML -> (validated config dict, notes about keys the form ignores)."""
    if not text or not text.strip():
        raise FormError("The YAML box is empty: paste a config or upload a .yaml file first.")
    try:
        raw = load_yaml_text(text, "The YAML")
    except YamlError as error:
        raise FormError(f"{error}.") from None
    config = config_from_dict(raw).to_dict()
    notes = []
    for key, reason in NOT_IN_FORM.items():
        if key in ("batch_size", "num_minibatches"):
            continue  # derived again from num_steps and mini_batch_size
        if _get(raw, key) not in (None, "", [], {}):
            notes.append(f"`{key}` is not used by the studio ({reason}).")
    return config, notes


def yaml_from_config(config: TrainConfig) -> str:
    return to_yaml(config)


__all__ = [
    "advanced_groups",
    "ADVANCED_FIELDS",
    "BASIC_FIELDS",
    "FORM_FIELDS",
    "NOT_IN_FORM",
    "ConfigError",
    "FormError",
    "FormField",
    "check_web_safety",
    "config_from_yaml_text",
    "form_values",
    "raw_config_from_form",
    "tuned_config",
    "validated_config",
    "visible_fields",
    "visible_groups",
    "yaml_from_config",
]
