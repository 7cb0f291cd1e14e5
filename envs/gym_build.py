"""One copy of a Gymnasium env, as `GymVecEnv` (envs/gym_vec.py) and its worker processes build it:
from a registered id, an entry point `package.module:ClassName` or a factory, with the user's
options and wrappers, and the errors that say what was wrong with them."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

import gymnasium
import numpy as np

from envs.errors import EnvConfigError, UnknownEnvError


def load_entry_point(entry_point: str, what: str):
    """The object an entry point `package.module:Name` names; a clear error (naming `what`) if none."""
    error_class = EnvConfigError if what == "wrapper" else UnknownEnvError
    module_name, _, attribute = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise error_class(f"{what} {entry_point!r}: cannot import module {module_name!r} ({error})") from error
    try:
        return getattr(module, attribute)
    except AttributeError as error:
        raise error_class(f"{what} {entry_point!r}: module {module_name!r} has no {attribute!r}") from error


def make_single_env(
    env_id: str | Callable[[], gymnasium.Env], wrappers: tuple[str, ...], env_kwargs: dict, render_mode: str | None
) -> gymnasium.Env:
    """One copy of the env with the wrappers applied (module-level so async workers can pickle it)."""
    import envs.gym_registration  # noqa: F401  (so FlappyBird-v0 / Snake-v0 exist in workers too)

    kwargs = dict(env_kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if callable(env_id):  # a factory () -> gymnasium.Env (the Python API): it picks its own render mode
        env = env_id()
    elif ":" in env_id and env_id not in gymnasium.registry:
        env = load_entry_point(env_id, "environment entry point")(**kwargs)
    else:
        env = gymnasium.make(env_id, **kwargs)
    for wrapper_entry_point in wrappers:
        env = load_entry_point(wrapper_entry_point, "wrapper")(env)
    return env


def bad_kwarg_error(env_id: str, error: TypeError) -> EnvConfigError:
    """The EnvConfigError for a TypeError raised while building `env_id` with the user's options."""
    match = re.search(r"unexpected keyword argument '([^']+)'", str(error))
    if match:
        return EnvConfigError(f"{env_id} does not take the option {match.group(1)!r} ({error})")
    return EnvConfigError(f"{env_id} could not be built with the options given: {error}")


def vec_spaces(
    name: str, observation_space: gymnasium.Space, action_space: gymnasium.Space
) -> tuple[gymnasium.spaces.Box, tuple[int, int] | None, int | None]:
    """What `GymVecEnv` makes of one copy's spaces: (its float32 Box observation space, (n, start)
    of a Discrete observation it turns into one-hot vectors or None, the start of a Discrete
    action space or None for a Box one); EnvConfigError for the spaces it does not take."""
    if isinstance(observation_space, gymnasium.spaces.Box):
        one_hot = None
        low, high = observation_space.low.astype(np.float32), observation_space.high.astype(np.float32)
        observations = gymnasium.spaces.Box(low, high, dtype=np.float32)
    elif isinstance(observation_space, gymnasium.spaces.Discrete):
        one_hot = (int(observation_space.n), int(observation_space.start))
        observations = gymnasium.spaces.Box(0.0, 1.0, shape=(int(observation_space.n),), dtype=np.float32)
    else:
        raise EnvConfigError(
            f"{name}: observation space {observation_space} is not supported; only Box and Discrete "
            f"are. Flatten it with a wrapper, e.g. wrappers=['gymnasium.wrappers:FlattenObservation']"
        )
    if isinstance(action_space, gymnasium.spaces.Discrete):
        return observations, one_hot, int(action_space.start)
    if isinstance(action_space, gymnasium.spaces.Box):
        return observations, one_hot, None
    raise EnvConfigError(f"{name}: action space {action_space} is not supported; only Discrete and Box are")
