"""The errors `envs` raises: every one is an `EnvError` (bad names and options are ValueErrors too)."""

from __future__ import annotations


class EnvError(Exception):
    """Base class of every error raised by `envs` (unknown name, bad kwarg, bad device...)."""


class UnknownEnvError(EnvError, ValueError):
    """The environment name is neither built in, nor a Gymnasium id, nor an entry point."""


class EnvConfigError(EnvError, ValueError):
    """A keyword argument given to an environment is unknown or has a bad value."""
