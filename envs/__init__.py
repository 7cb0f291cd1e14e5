"""Batched game environments (CartPole, Flappy Bird, Snake) and an adapter for any Gymnasium env.

    from envs import make_vec_env
    env = make_vec_env("flappy_bird", num_envs=1024, device="cpu", seed=0)
    obs = env.reset()
    obs, reward, terminated, truncated, info = env.step(actions)   # torch tensors, auto-reset
    summary = env.stats.drain()   # episodes finished since the last drain

Importing `envs` also registers the single-env Gymnasium ids `FlappyBird-v0` and `Snake-v0`.
It does not import torch: the names (`builtin_env_names`, `resolve_env_name`) answer without it,
so the studio's page is up before torch loads; `VecEnv`, `EpisodeStats` and `EpisodeSummary`
(which need torch) are imported on first use, `from envs import VecEnv` works as always.
"""

import importlib

import envs.gym_registration  # noqa: F401,E402  (registers FlappyBird-v0 / Snake-v0)
from envs.errors import EnvConfigError, EnvError, UnknownEnvError
from envs.registry import builtin_env_names, make_vec_env, resolve_env_name

# name -> the module that defines it, imported on first use (each imports torch)
_LAZY = {"VecEnv": "envs.base", "EpisodeStats": "envs.stats", "EpisodeSummary": "envs.stats"}

__all__ = [
    "EnvConfigError",
    "EnvError",
    "EpisodeStats",
    "EpisodeSummary",
    "UnknownEnvError",
    "VecEnv",
    "builtin_env_names",
    "make_vec_env",
    "resolve_env_name",
]


def __getattr__(name: str):  # PEP 562: `envs.VecEnv` imports envs.base (torch) only when asked
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
