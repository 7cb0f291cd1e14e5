"""The envs the Python API (trainer/api.py) trains on besides a name: a callable returning a
`gymnasium.Env` (vectorised as `vector_env` / `num_workers` say) or a `VecEnv` object (used as it is).

`wrap_env` turns either into what a `Model` needs (a config label, a config -> env factory, the
keys the env fixes, its action space); `check_fixed` refuses settings that contradict the env given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.config.checks import ConfigError
from trainer.config.keys import TrainConfig


def wrap_env(env: Any) -> tuple[str, Callable[[TrainConfig], Callable], dict, Any]:
    """(config env_name label, config -> env factory (num_envs, device, seed) -> VecEnv, keys
    the env fixes, its single action space). A Gymnasium env factory is vectorised as the config
    says (`vector_env`, `num_workers`: the worker pool when num_workers > 1, as for an env given
    by name)."""
    if is_vec_env(env):

        def reuse(num_envs, device, seed):
            return env

        return (
            _label(getattr(env, "name", None), type(env)),
            lambda config: reuse,
            {"num_envs": int(env.num_envs), "device": str(env.device), "gif_interval": 0},
            env.single_action_space,
        )
    if callable(env):
        from envs.registry import make_gymnasium_vec_env

        def make_factory(config: TrainConfig) -> Callable:
            def factory(num_envs, device, seed):
                return make_gymnasium_vec_env(
                    env,
                    num_envs,
                    device=device,
                    seed=seed,
                    vector_env=config.vector_env,
                    num_workers=config.num_workers,
                )

            return factory

        probe = env()
        try:
            spec_id = getattr(getattr(probe, "spec", None), "id", None)
            action_space = probe.action_space
        finally:
            probe.close()
        return _label(spec_id, env), make_factory, {}, action_space
    raise ConfigError(
        f"env must be an env name (e.g. 'cartpole', 'Acrobot-v1'), a callable returning a "
        f"gymnasium.Env, or a VecEnv; got {type(env).__name__}"
    )


def is_vec_env(env: Any) -> bool:
    """An env object the rollout can drive: an envs.base.VecEnv (its declared fast paths included).
    Something that only looks like one is refused with what to do, not an AttributeError mid-rollout."""
    from envs.base import VecEnv
    from envs.errors import EnvError

    looks_like_one = all(hasattr(env, name) for name in ("num_envs", "single_observation_space", "step", "reset"))
    if looks_like_one and not isinstance(env, VecEnv):
        raise EnvError(
            f"{type(env).__name__} looks like a vector env but is not an envs.base.VecEnv: subclass VecEnv (it "
            f"declares step_groups, step_views, send and recv with defaults built on your step), or pass a "
            f"Gymnasium env id or a function that makes one Gymnasium env"
        )
    return looks_like_one


def _label(name: str | None, fallback: Any) -> str:
    """What the config (and the saved model) calls an env given as an object: its registered name
    when it has one, else its entry point `module:QualifiedName` (enough to tell it apart)."""
    from envs import resolve_env_name
    from envs.errors import EnvError

    if name:
        try:
            resolve_env_name(name)
            return name
        except EnvError:
            pass
    return f"{getattr(fallback, '__module__', 'env')}:{getattr(fallback, '__qualname__', type(fallback).__name__)}"


def check_fixed(settings: dict, fixed: dict) -> dict:
    for name, value in fixed.items():
        if name in settings and name != "gif_interval" and str(settings[name]) != str(value):
            raise ConfigError(
                f"{name}={settings[name]!r} does not fit the VecEnv given, which has {name} {value!r}; "
                f"leave {name} out (it is taken from the env) or build the env with it"
            )
    if "env_kwargs" in settings or "wrappers" in settings:
        raise ConfigError(
            "env_kwargs / wrappers apply to envs given by name; an env object or factory "
            "is used as it is built (apply options and wrappers inside the factory)"
        )
    return {name: value for name, value in settings.items() if name not in fixed}
