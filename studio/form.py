"""The Train form as data: which config keys it shows, and conversions form <-> config <-> YAML.

`FORM_FIELDS` lists every `TrainConfig` key the web form edits, in display order; `NOT_IN_FORM`
names the others and why. A test checks the two together cover every TrainConfig key, so a
new trainer option cannot silently go missing from the studio.

Nothing here imports gradio: `studio.ui` turns each FormField into a component.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from trainer.config import (
    ALGORITHMS,
    LR_SCALING_RULES,
    MODEL_TYPES,
    CheckpointConfig,
    ConfigError,
    TrainConfig,
    config_from_dict,
    to_yaml,
)

CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"
VECTOR_ENV_DEFAULT = "default"
# Entry points (`package.module:Class`) make the server import and run code.
GYM_PREFIX = "gym:"


@dataclass(frozen=True)
class FormField:
    """One config key as a form control."""

    key: str  # TrainConfig key; "checkpoint.interval" reaches into the checkpoint section
    kind: str  # "int", "float", "bool", "choice", "text", "yaml"
    choices: tuple[str, ...] = ()
    optional: bool = False  # an empty box means "not set" (null)
    basic: bool = False  # shown above the Advanced section

    @property
    def help(self) -> str:
        """The trainer's own description of the key (the config reference)."""
        section, _, name = self.key.rpartition(".")
        owner = CheckpointConfig if section == "checkpoint" else TrainConfig
        text = ""
        for item in dataclasses.fields(owner):
            if item.name == name:
                text = str(item.metadata.get("help", "")).replace("`", "")
        if self.optional and self.kind in ("int", "float"):
            text += " (0: not set)"
        return text


BASIC_FIELDS = (
    FormField("model_type", "choice", tuple(MODEL_TYPES), basic=True),
    FormField("env_name", "text", basic=True),
    FormField("num_envs", "int", basic=True),
    FormField("device", "text", basic=True),
    FormField("total_timesteps", "int", basic=True),
    FormField("seed", "int", basic=True),
)
ADVANCED_FIELDS = (
    FormField("algo", "choice", ALGORITHMS),
    FormField("num_steps", "int", optional=True),
    FormField("mini_batch_size", "int", optional=True),
    FormField("update_epochs", "int"),
    FormField("learning_rate", "float"),
    FormField("anneal_lr", "bool"),
    FormField("lr_scaling", "choice", LR_SCALING_RULES),
    FormField("lr_reference_batch", "int"),
    FormField("gamma", "float"),
    FormField("gae_lambda", "float"),
    FormField("clip_coef", "float"),
    FormField("clip_vloss", "bool"),
    FormField("norm_adv", "bool"),
    FormField("ent_coef", "float"),
    FormField("vf_coef", "float"),
    FormField("max_grad_norm", "float"),
    FormField("target_kl", "float", optional=True),
    FormField("norm_obs", "bool"),
    FormField("norm_reward", "bool"),
    FormField("use_per", "bool"),
    FormField("per_alpha", "float"),
    FormField("per_beta", "float"),
    FormField("vector_env", "choice", (VECTOR_ENV_DEFAULT, "sync", "async")),
    FormField("num_workers", "int", optional=True),
    FormField("torch_threads", "int"),
    FormField("checkpoint.interval", "int"),
    FormField("checkpoint.keep", "int"),
    FormField("gif_interval", "int"),
    FormField("gif_max_frames", "int"),
    FormField("gif_time_fraction", "float"),
    FormField("log_interval", "int"),
    FormField("tensorboard", "bool"),
    FormField("env_kwargs", "yaml"),
    FormField("wrappers", "yaml"),
)
FORM_FIELDS = BASIC_FIELDS + ADVANCED_FIELDS
NOT_IN_FORM = {
    "batch_size": "derived: num_envs x num_steps (shown under the form)",
    "num_minibatches": "derived: batch_size / mini_batch_size",
    "backend": "only used by distributed (torchrun) runs, which the studio does not launch",
    "gpu_ids": "only used by distributed (torchrun) runs; pick the GPU with `device`",
    "checkpoint.path": "the studio always keeps checkpoints inside the run folder",
}


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
        if form_field.optional and form_field.kind in ("int", "float") and value is None:
            value = 0
        elif form_field.key == "vector_env":
            value = VECTOR_ENV_DEFAULT if value is None else ("async" if value is True else "sync" if value is False else value)
        elif form_field.kind == "yaml":
            value = "" if not value else yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()
        values.append(value)
    return values


def tuned_config(env_name: str) -> dict:
    """The tuned config of a built-in env (configs/<env>.yaml), else the defaults for `env_name`."""
    try:
        from envs import resolve_env_name

        canonical = resolve_env_name(env_name)
    except Exception:  # noqa: BLE001 - unknown names keep the defaults; Start reports them
        canonical = env_name
    path = CONFIGS_DIR / f"{canonical}.yaml"
    raw: dict = {}
    if path.is_file():
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        raw = loaded if isinstance(loaded, dict) else {}
    raw["env_name"] = env_name
    return config_from_dict(raw).to_dict()


# ----------------------------------------------------------------------------- form -> config


def _parse_yaml_field(key: str, text: Any) -> Any:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if not isinstance(text, str):
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise FormError(f"{key}: could not read {text!r} as YAML ({error.problem}). "
                        "Write a mapping like {grid_size: 12} or a list like [pkg.module:Wrapper].")


def raw_config_from_form(values: Sequence[Any]) -> dict:
    """Form control values (in FORM_FIELDS order) -> a raw config dict for `config_from_dict`."""
    if len(values) != len(FORM_FIELDS):
        raise FormError(f"expected {len(FORM_FIELDS)} form values, got {len(values)}")
    raw: dict = {}
    for form_field, value in zip(FORM_FIELDS, values):
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
    env_name = str(raw.get("env_name") or "").strip()
    inner = env_name[len(GYM_PREFIX):] if env_name.startswith(GYM_PREFIX) else env_name
    if ":" in inner and not allow_custom_envs:
        raise FormError(
            f"{env_name!r} is a Python entry point (module:Class): loading it imports and runs that "
            "module on the server, so the studio only accepts it when started with "
            "`python app.py --allow-custom-envs`. Built-ins and registered Gymnasium ids "
            "(e.g. Acrobot-v1) always work."
        )
    wrappers = raw.get("wrappers")
    if wrappers and not allow_custom_envs:
        raise FormError(
            "wrappers are Python entry points (module:Class) that the server would import and run; "
            "the studio accepts them only when started with `python app.py --allow-custom-envs`."
        )
    checkpoint = raw.get("checkpoint")
    if isinstance(checkpoint, dict) and checkpoint.get("path") not in (None, "", "checkpoints"):
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
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = ""
        mark = getattr(error, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise FormError(f"This is not valid YAML{where}: {problem}. Check the indentation and "
                        "that every line is `key: value`.") from error
    if not isinstance(raw, dict):
        raise FormError(f"The YAML must be a mapping of `key: value` lines, got a {type(raw).__name__}.")
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
    "ADVANCED_FIELDS", "BASIC_FIELDS", "FORM_FIELDS", "NOT_IN_FORM", "ConfigError", "FormError",
    "FormField", "check_web_safety", "config_from_yaml_text", "form_values", "raw_config_from_form",
    "tuned_config", "validated_config", "yaml_from_config",
]
