"""Checks of the options a game takes (and of its device): a clear EnvConfigError / EnvError naming
the option, shared by the games so that every one words them alike."""

from __future__ import annotations

import math

import torch

from envs.errors import EnvConfigError, EnvError


def positive_int(name: str, value: object) -> int:
    """`value` if it is a whole number >= 1 (not a bool), else an EnvConfigError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EnvConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def finite_number(name: str, value: object) -> float:
    """`value` as a float if it is a finite number (not a bool), else an EnvConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EnvConfigError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def number_between(name: str, value: object, minimum: float = 0.0, maximum: float = math.inf) -> float:
    """`value` as a float if it is a number (not a bool) in [minimum, maximum], else an
    EnvConfigError naming `name` and the bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= maximum:
        bounds = f"between {minimum} and {maximum}" if maximum < math.inf else f"at least {minimum}"
        raise EnvConfigError(f"{name} must be a number {bounds}, got {value!r}")
    return float(value)


def size_pair(name: str, value: object, low: int, high: int) -> tuple[int, int]:
    """(height, width) from an int (a square) or a [height, width] pair, each in low..high."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in value)
    ):
        raise EnvConfigError(f"{name} must be an integer or [height, width], each {low}..{high}, got {value!r}")
    return int(value[0]), int(value[1])


def resolve_device(device: torch.device | str) -> torch.device:
    """Turn 'cpu' / 'cuda' / 'cuda:1' into a torch.device, failing clearly if it is unusable."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise EnvError(f"device must look like 'cpu', 'cuda' or 'cuda:0', got {device!r}") from error
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise EnvError(f"device {device!r} asked for, but CUDA is not available here; use device='cpu'")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise EnvError(
                f"device {device!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    return resolved
