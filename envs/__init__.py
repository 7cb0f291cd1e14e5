"""Batched game environments (CartPole, Flappy Bird, Snake) and an adapter for any Gymnasium env.

    from envs import make_vec_env
    env = make_vec_env("flappy_bird", num_envs=1024, device="cpu", seed=0)
    obs = env.reset()
    obs, reward, terminated, truncated, info = env.step(actions)   # torch tensors, auto-reset
    summary = env.stats.drain()   # episodes finished since the last drain

Importing `envs` also registers the single-env Gymnasium ids `FlappyBird-v0` and `Snake-v0`.
"""

import envs.gym_registration  # noqa: F401,E402  (registers FlappyBird-v0 / Snake-v0)
from envs.base import VecEnv
from envs.errors import EnvConfigError, EnvError, UnknownEnvError
from envs.registry import builtin_env_names, make_vec_env, resolve_env_name
from envs.stats import EpisodeStats, EpisodeSummary

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
