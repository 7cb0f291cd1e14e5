"""Names -> environments: `make_vec_env` builds any env the studio can train on.

Built-in (native, batched) names: `cartpole`, `flappy_bird`, `snake`, plus the aliases users
bring from guides (`CartPole-v1`, `FlappyBird-v0`, `FlappyBirdPygame-v0`, `Snake-v0`...),
case-insensitive. Anything else is a Gymnasium id (`Acrobot-v1`) or an entry point
(`package.module:ClassName`) and runs through Gymnasium's own vector envs (`envs/gym_vec.py`).
The prefix `gym:` forces that adapter even for a built-in (`gym:CartPole-v1`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING

from envs.errors import EnvConfigError, UnknownEnvError
from envs.names import did_you_mean

if TYPE_CHECKING:  # names are resolved without torch: the studio's page answers before torch is imported
    import torch

    from envs.base import VecEnv

GYM_PREFIX = "gym:"

# canonical name -> "module:Class" of the native batched env
_NATIVE_ENVS: dict[str, str] = {
    "cartpole": "envs.cartpole:CartPoleVecEnv",
    "flappy_bird": "envs.flappy_bird:FlappyBirdVecEnv",
    "snake": "envs.snake:SnakeVecEnv",
}

# The Gymnasium id of each built-in, for the adapter (`gym:` prefix, wrappers, vector_env).
_GYMNASIUM_IDS: dict[str, str] = {"cartpole": "CartPole-v1", "flappy_bird": "FlappyBird-v0", "snake": "Snake-v0"}

# lower-case alias -> canonical name
_ALIASES: dict[str, str] = {
    "cartpole": "cartpole",
    "cart_pole": "cartpole",
    "cart-pole": "cartpole",
    "cartpole-v1": "cartpole",
    "flappy_bird": "flappy_bird",
    "flappybird": "flappy_bird",
    "flappy-bird": "flappy_bird",
    "flappy": "flappy_bird",
    "flappybird-v0": "flappy_bird",
    "flappybirdpygame-v0": "flappy_bird",
    "snake": "snake",
    "snake-v0": "snake",
}


def builtin_env_names() -> list[str]:
    """The native environments the studio offers: ["cartpole", "flappy_bird", "snake"]."""
    return list(_NATIVE_ENVS)


def builtin_aliases() -> dict[str, str]:
    """Every accepted spelling of a built-in (lower case) -> its canonical name."""
    return dict(_ALIASES)


def _gymnasium_ids() -> list[str]:
    import gymnasium

    import envs.gym_registration  # noqa: F401  (our own ids, FlappyBird-v0 and Snake-v0)

    return list(gymnasium.registry.keys())


def _is_entry_point(name: str) -> bool:
    module, colon, attribute = name.partition(":")
    return bool(colon) and bool(module) and bool(attribute) and " " not in name


def _unknown_name_error(name: str) -> UnknownEnvError:
    candidates = list(_NATIVE_ENVS) + sorted(set(_ALIASES) - set(_NATIVE_ENVS)) + _gymnasium_ids()
    hint = did_you_mean(name, candidates)
    return UnknownEnvError(
        f"Unknown environment {name!r}.{hint} Built-in environments: {', '.join(_NATIVE_ENVS)} "
        f"(aliases: CartPole-v1, FlappyBird-v0, FlappyBirdPygame-v0, Snake-v0). Any registered "
        f"Gymnasium id (e.g. Acrobot-v1, Pendulum-v1) or an entry point 'package.module:ClassName' "
        f"also works."
    )


def resolve_env_name(name: str) -> str:
    """Alias -> canonical name (`CartPole-v1` -> `cartpole`); Gymnasium ids, entry points and
    `gym:`-prefixed names come back unchanged. Raises UnknownEnvError (with the list of names
    and the closest match) for anything else."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownEnvError(f"environment name must be a non-empty string, got {name!r}")
    name = name.strip()
    if name.lower() in _ALIASES:
        return _ALIASES[name.lower()]
    if name.startswith(GYM_PREFIX):
        inner = name[len(GYM_PREFIX) :].strip()
        if not inner:
            raise UnknownEnvError("'gym:' must be followed by a Gymnasium id, e.g. 'gym:CartPole-v1'")
        if inner.lower() not in _ALIASES and not _is_entry_point(inner) and inner not in _gymnasium_ids():
            raise _unknown_name_error(inner)
        return GYM_PREFIX + inner
    if _is_entry_point(name) or name in _gymnasium_ids():
        return name
    raise _unknown_name_error(name)


def _native_class(canonical: str) -> type[VecEnv]:
    """The VecEnv class of built-in `canonical` (its module is imported on first use)."""
    module_name, _, class_name = _NATIVE_ENVS[canonical].partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise EnvConfigError(f"{canonical} is not available yet in this version of envs/") from error


def _builtin_class(name: str) -> type[VecEnv] | None:
    """The VecEnv class of built-in env `name` under any alias or `gym:` spelling; None for
    Gymnasium ids, entry points (never imported here) and unknown names."""
    try:
        resolved = resolve_env_name(name)
    except UnknownEnvError:
        return None
    inner = resolved[len(GYM_PREFIX) :] if resolved.startswith(GYM_PREFIX) else resolved
    canonical = _ALIASES.get(inner.lower())
    return None if canonical is None else _native_class(canonical)


def played_env_kwargs(name: str, env_kwargs: dict | None) -> dict:
    """`env_kwargs` without the options that only shape training (`VecEnv.training_only_options`,
    e.g. Flappy Bird's `hard_pipes` curriculum): the game a trained model is judged on."""
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        return env_kwargs  # malformed: left for the caller's own check to name
    env_class = _builtin_class(name)
    dropped = env_class.training_only_options if env_class is not None else ()
    return {key: value for key, value in (env_kwargs or {}).items() if key not in dropped}


def score_unit(name: str) -> str | None:
    """The unit of env `name`'s game score, as its class declares it (`VecEnv.score_unit`):
    "pipes" for flappy_bird, "food" for snake, "steps balanced" for cartpole, under any alias or
    `gym:` spelling (their single-env versions report the same score). None where the score is
    the episode return: Gymnasium ids, entry points (never imported here), unknown names."""
    env_class = _builtin_class(name)
    return None if env_class is None else env_class.score_unit


def _load_entry_point(entry_point: str):
    module_name, _, attribute = entry_point.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attribute)


def _check_env_kwargs(env_class: type, env_kwargs: dict, env_name: str) -> None:
    parameters = inspect.signature(env_class.__init__).parameters
    accepted = [p for p in parameters if p not in ("self", "num_envs", "device", "seed")]
    for key in env_kwargs:
        if key not in accepted:
            hint = did_you_mean(key, accepted)
            raise EnvConfigError(
                f"{env_name} does not take the option {key!r}.{hint} "
                f"Options it takes: {', '.join(accepted) or '(none)'}"
            )


VECTOR_ENV_MODES = ("sync", "async", "pool", "async_pool")


def choose_vectorization(
    vector_env: bool | str | None, num_workers: int | str | None, num_envs: int
) -> tuple[str, str]:
    """(mode, why) for a Gymnasium env: the pool whenever worker processes are asked for."""
    from envs.cores import available_cores, resolve_num_workers

    if isinstance(vector_env, str):
        mode = vector_env.strip().lower()
        if mode not in VECTOR_ENV_MODES:
            raise EnvConfigError(
                f"vector_env must be one of {', '.join(VECTOR_ENV_MODES)}, true, false or null, got {vector_env!r}"
            )
        return mode, f"vector_env: {mode} asked for"
    if vector_env is False:
        return "sync", "vector_env: false"
    workers = resolve_num_workers(num_workers, num_envs) if (num_workers is not None or vector_env) else 1
    if workers > 1:
        source = (
            f"num_workers: {num_workers}"
            if num_workers not in (None, "auto")
            else f"num_workers: auto = {available_cores()} usable CPU cores"
        )
        return "pool", (f"{source} -> the shared-memory worker pool, {workers} processes sharing the {num_envs} envs")
    if vector_env:
        return "sync", "vector_env: true, but only 1 worker (1 usable core or 1 env): stepped in this process"
    return "sync", "no num_workers > 1: stepped in this process"


def make_vec_env(
    name: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    seed: int | None = None,
    vector_env: bool | str | None = None,
    num_workers: int | None = None,
    wrappers: list[str] | None = None,
    **env_kwargs,
) -> VecEnv:
    """Build `num_envs` copies of environment `name` as one batched `VecEnv` on `device`.

    name: a built-in (`cartpole`, `flappy_bird`, `snake` or an alias), a Gymnasium id, an entry
        point `package.module:ClassName`, or `gym:<id>` to force Gymnasium's vector env.
    seed: seeds all randomness (same seed, same trajectories); None draws a fresh seed.
    vector_env: None/False: native batched env for built-ins, the Gymnasium adapter otherwise.
        True or a mode runs through the adapter (built-ins use their registered single-env
        ids): 'pool' (our shared-memory worker pool, envs/pool.py), 'async_pool' (the pool in
        two halves that overlap with the policy), 'sync' (in this process) or 'async'
        (Gymnasium's AsyncVectorEnv, one process per env). True or None with num_workers > 1
        picks 'pool'.
    num_workers: worker processes of the pool; 'auto': one per CPU core this process may use.
    The env's `vectorization` attribute says which mode was chosen and why (for the log).
    wrappers: entry points `package.module:WrapperClass` of `gymnasium.Wrapper`s applied to
        every single env (built-ins then run through the Gymnasium adapter).
    env_kwargs: the environment's own options (e.g. `gap_size=120` for flappy_bird); an
        unknown key raises EnvConfigError naming it.
    """
    if (
        num_workers is not None
        and num_workers != "auto"
        and (isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1)
    ):
        raise EnvConfigError(f"num_workers must be a positive integer, 'auto' or None, got {num_workers!r}")
    if wrappers is not None and (
        not isinstance(wrappers, (list, tuple)) or not all(isinstance(w, str) for w in wrappers)
    ):
        raise EnvConfigError(f"wrappers must be a list of entry points 'package.module:Class', got {wrappers!r}")
    if vector_env is not None and not isinstance(vector_env, (bool, str)):
        raise EnvConfigError(
            f"vector_env must be one of {', '.join(VECTOR_ENV_MODES)}, true, false or null, got {vector_env!r}"
        )
    resolved = resolve_env_name(name)
    use_adapter = (
        resolved.startswith(GYM_PREFIX)
        or resolved not in _NATIVE_ENVS
        or vector_env is True
        or isinstance(vector_env, str)
        or bool(wrappers)
    )
    if not use_adapter:
        env_class = _native_class(resolved)
        _check_env_kwargs(env_class, env_kwargs, resolved)
        return env_class(num_envs=num_envs, device=device, seed=seed, **env_kwargs)

    gym_id = resolved[len(GYM_PREFIX) :] if resolved.startswith(GYM_PREFIX) else resolved
    if gym_id.lower() in _ALIASES:
        canonical = _ALIASES[gym_id.lower()]
        gym_id = _GYMNASIUM_IDS[canonical]
    return make_gymnasium_vec_env(
        gym_id, num_envs, device, seed, vector_env, num_workers, wrappers=list(wrappers or []), env_kwargs=env_kwargs
    )


def make_gymnasium_vec_env(
    env_id,
    num_envs: int,
    device: torch.device | str = "cpu",
    seed: int | None = None,
    vector_env: bool | str | None = None,
    num_workers: int | str | None = None,
    wrappers: list[str] | None = None,
    env_kwargs: dict | None = None,
) -> VecEnv:
    """A Gymnasium id, entry point or env factory (a callable returning a `gymnasium.Env`, as
    the Python API takes) through the adapter, vectorised as `choose_vectorization` says; the
    env's `vectorization` attribute says which mode and why (for the log)."""
    from envs.gym_vec import GymVecEnv

    mode, why = choose_vectorization(vector_env, num_workers, num_envs)
    env = GymVecEnv(
        env_id,
        num_envs=num_envs,
        device=device,
        seed=seed,
        mode=mode,
        num_workers=num_workers,
        wrappers=list(wrappers or []),
        env_kwargs=env_kwargs or {},
    )
    env.vectorization = f"{env.name}: vectorisation {mode} ({why})"
    return env
