"""Value checks for config keys: each one cleans a value or raises ConfigError naming the key,
the value and the rule. A check also says how the studio shows the key (`kind`, `choices`,
`optional`), so a key's declaration in trainer/config/keys.py holds everything about it.

    Integer(minimum=1, maximum=10**6)("num_envs", "64")   -> 64
    Real(0.0, 1.0)("gamma", 1.5)                           -> ConfigError: gamma must be in [0.0, 1.0], got 1.5
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


def did_you_mean(word: object, candidates, prefix: str = "") -> str:
    """The one "Did you mean ...?" rule (envs.names.closest_name), imported when a value is refused."""
    from envs.names import did_you_mean

    return did_you_mean(word, candidates, prefix)


def short_repr(value: Any, limit: int = 80) -> str:
    """repr() cut to `limit` characters: error messages quote values, never whole documents."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...)"


def number_from_text(value: Any) -> Any:
    """YAML 1.1 (PyYAML) reads `1e-3` and `2e6` as strings; `2_000_000` is already an int."""
    if isinstance(value, str) and len(value) <= 64:
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return value
    return value


@dataclass(frozen=True, kw_only=True)
class Check:
    """Base of all checks: `kind` tells the studio which control to draw."""

    kind = "text"
    choices: tuple = ()
    optional: bool = False  # None (null) is allowed and means "not set"

    def __call__(self, key: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        return self.clean(key, value)

    def clean(self, key: str, value: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Integer(Check):
    minimum: int = 1
    maximum: int | None = None
    kind = "int"

    def clean(self, key: str, value: Any) -> int:
        value = number_from_text(value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        kind = "a positive integer" if self.minimum == 1 else f"an integer >= {self.minimum}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be {kind}{' or null' if self.optional else ''}, got {short_repr(value)}")
        if value < self.minimum:
            raise ConfigError(f"{key} must be {kind}, got {short_repr(value)}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{key} must be at most {self.maximum:_}, got {short_repr(value)}")
        return value


@dataclass(frozen=True)
class Real(Check):
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    kind = "float"

    def clean(self, key: str, value: Any) -> float:
        value = number_from_text(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{key} must be a number{' or null' if self.optional else ''}, got {short_repr(value)}")
        value = float(value)
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and value > self.high
        if too_low or too_high:
            left = "(" if self.low_open else "["
            low = self.low if self.low is not None else "-inf"
            high = self.high if self.high is not None else "inf"
            raise ConfigError(f"{key} must be in {left}{low}, {high}], got {value}")
        return value


@dataclass(frozen=True)
class Boolean(Check):
    kind = "bool"

    def clean(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        words = ("true", "false", "yes", "no", "on", "off", "1", "0")
        if isinstance(value, str) and value.strip().lower() in words:
            return value.strip().lower() in ("true", "yes", "on", "1")
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"{key} must be true or false, got {short_repr(value)}")


@dataclass(frozen=True)
class Choice(Check):
    """One of `choices` (case-insensitive); `off` is what null / false read as, if given."""

    off: str | None = None
    kind = "choice"

    def clean(self, key: str, value: Any) -> str:
        if self.off is not None and value in (None, False):
            return self.off
        if isinstance(value, str) and value.strip().lower() in self.choices:
            return value.strip().lower()
        return self.refuse(key, value)

    def refuse(self, key: str, value: Any) -> str:
        hint = did_you_mean(value, self.choices)
        raise ConfigError(f"{key} must be one of {', '.join(self.choices)}, got {short_repr(value)}.{hint}")


# Words that mark a language / vision foundation model rather than an RL policy network.
_LANGUAGE_MODEL_WORDS = re.compile(
    r"qwen|llama|gpt|mistral|mixtral|gemma|phi-?\d|falcon|bert|t5|bloom|opt-|deepseek|claude|"
    r"vicuna|olmo|\d+(\.\d+)?b\b|instruct|chat",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ModelType(Choice):
    """A policy network from `described` (name -> description); language models get a pointer."""

    described: tuple = field(default=(), kw_only=True)  # ((name, description), ...)

    def refuse(self, key: str, value: Any) -> str:
        listing = "; ".join(f"{name} ({text})" for name, text in self.described)
        if isinstance(value, str) and _LANGUAGE_MODEL_WORDS.search(value[:200]):
            raise ConfigError(
                f"model_type {short_repr(value)} looks like a language model; language models are not policies "
                f"here. The policy is a small network trained from scratch on the game's observations. "
                f"model_type must be one of: {listing}"
            )
        hint = did_you_mean(value, self.choices)
        raise ConfigError(f"unknown model_type {short_repr(value)}.{hint} model_type must be one of: {listing}")


@dataclass(frozen=True)
class Text(Check):
    max_length: int = 200

    def clean(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{key} must be a non-empty string, got {short_repr(value)}")
        if len(value) > self.max_length:
            raise ConfigError(f"{key} must be at most {self.max_length} characters, got {len(value)}")
        return value.strip()


@dataclass(frozen=True)
class Device(Check):
    def clean(self, key: str, value: Any) -> str:
        text = value.strip().lower() if isinstance(value, str) else value
        if text in ("gpu", "cuda:gpu", "nvidia"):
            raise ConfigError(f"{key} must be auto, cpu, cuda or cuda:N, got {short_repr(value)}. Did you mean 'cuda'?")
        if not isinstance(text, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d{1,3})?", text):
            raise ConfigError(f"{key} must be auto, cpu, cuda or cuda:N, got {short_repr(value)}")
        if text.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(
                    f"device {text!r} asked for, but this machine has no usable CUDA GPU "
                    f"(torch.cuda.is_available() is False). Use device: auto (the GPU when there is one, "
                    f"else the CPU) or device: cpu"
                )
            count = torch.cuda.device_count()
            if int(text.partition(":")[2] or 0) >= count:
                raise ConfigError(
                    f"device {text!r} does not exist: this machine has {count} "
                    f"CUDA device(s), cuda:0 to cuda:{count - 1}"
                )
        return text


@dataclass(frozen=True)
class Mapping(Check):
    kind = "yaml"

    def clean(self, key: str, value: Any) -> dict:
        if not isinstance(value, dict) or not all(isinstance(name, str) for name in value):
            raise ConfigError(f"{key} must be a mapping of option names to values, got {short_repr(value)}")
        return dict(value)

    def __call__(self, key: str, value: Any) -> dict:
        return {} if value is None else self.clean(key, value)


@dataclass(frozen=True)
class EntryPoints(Check):
    kind = "yaml"

    def __call__(self, key: str, value: Any) -> list:
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and ":" in item for item in value):
            raise ConfigError(f"{key} must be a list of entry points 'package.module:Class', got {short_repr(value)}")
        return list(value)


@dataclass(frozen=True)
class WorkerCount(Integer):
    """A number of worker processes, or `auto` (the CPU cores the run may use); blank: not set."""

    optional: bool = field(default=True, kw_only=True)
    kind = "text"  # the studio's box takes `auto` as well as a number

    def __call__(self, key: str, value: Any) -> int | str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        number = number_from_text(value)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ConfigError(f"{key} must be a positive integer, auto or null, got {short_repr(value)}")
        return self.clean(key, number)  # the bounds' own messages ("must be at most ...")


@dataclass(frozen=True)
class VectorEnv(Check):
    """Gymnasium vectorisation: true / false / sync / async / pool / async_pool / null."""

    choices: tuple = field(default=("sync", "async", "pool", "async_pool"), kw_only=True)
    optional: bool = field(default=True, kw_only=True)
    kind = "choice"

    def clean(self, key: str, value: Any) -> bool | str:
        if isinstance(value, bool):
            return value
        text = value.strip().lower() if isinstance(value, str) else None
        if text in self.choices:
            return text
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(f"{key} must be true, false, {', '.join(self.choices)} or null, got {short_repr(value)}")


@dataclass(frozen=True)
class DeviceIds(Check):
    """A list of CUDA device numbers: [0, 1], `0,1` or 0."""

    optional: bool = field(default=True, kw_only=True)
    kind = "yaml"

    def clean(self, key: str, value: Any) -> list:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if isinstance(value, str) and len(value) <= 200:
            parts = [part for part in value.replace(" ", "").split(",") if part]
            value = [int(part) for part in parts] if all(part.isdigit() for part in parts) else value
        if (
            not isinstance(value, (list, tuple))
            or not value
            or len(value) > 1024
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1024 for i in value)
        ):
            raise ConfigError(f"{key} must be a list of CUDA device numbers such as [0, 1], got {short_repr(value)}")
        return list(value)


@dataclass(frozen=True)
class Sizes(Check):
    """A short list of layer sizes, e.g. [128, 128]."""

    optional: bool = field(default=True, kw_only=True)
    maximum: int = 8192
    kind = "yaml"

    def clean(self, key: str, value: Any) -> list:
        if (
            not isinstance(value, (list, tuple))
            or not 1 <= len(value) <= 16
            or not all(
                isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= self.maximum for size in value
            )
        ):
            raise ConfigError(
                f"{key} must be a list of 1 to 16 layer sizes from 1 to {self.maximum}, such as "
                f"[128, 128], got {short_repr(value)}"
            )
        return list(value)
