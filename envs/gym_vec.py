"""Any Gymnasium environment as a `VecEnv`, through Gymnasium's own vector envs.

`GymVecEnv("Acrobot-v1", num_envs=8)` builds 8 copies with `gymnasium.make` (or, for an entry
point `package.module:ClassName`, by calling the class), applies the user's wrappers to every
copy, and steps them with `gymnasium.vector.SyncVectorEnv` (in this process) or
`AsyncVectorEnv` (one process per copy). Observations, rewards and done flags come back as
tensors on the chosen device; finished episodes feed the same `EpisodeStats` as the native
envs, with `score` taken from the env's `info["score"]` when it reports one, else the return.

This path is for coverage, not speed: every step crosses from tensors to numpy and back, and
each copy is a Python object stepped one at a time.
"""
from __future__ import annotations

import functools
import importlib
import re
from typing import Callable

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from torch import Tensor

from envs.base import EnvConfigError, EnvError, UnknownEnvError, VecEnv


def _load(entry_point: str, what: str):
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


def make_single_env(env_id: "str | Callable[[], gymnasium.Env]", wrappers: tuple[str, ...], env_kwargs: dict,
                    render_mode: str | None) -> gymnasium.Env:
    """One copy of the env with the wrappers applied (module-level so async workers can pickle it)."""
    import envs.gym_registration  # noqa: F401  (so FlappyBird-v0 / Snake-v0 exist in workers too)

    kwargs = dict(env_kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if callable(env_id):  # a factory () -> gymnasium.Env (the Python API): it picks its own render mode
        env = env_id()
    elif ":" in env_id and env_id not in gymnasium.registry:
        env = _load(env_id, "environment entry point")(**kwargs)
    else:
        env = gymnasium.make(env_id, **kwargs)
    for wrapper_entry_point in wrappers:
        env = _load(wrapper_entry_point, "wrapper")(env)
    return env


def _bad_kwarg_error(env_id: str, error: TypeError) -> EnvConfigError:
    match = re.search(r"unexpected keyword argument '([^']+)'", str(error))
    if match:
        return EnvConfigError(f"{env_id} does not take the option {match.group(1)!r} ({error})")
    return EnvConfigError(f"{env_id} could not be built with the options given: {error}")


class GymVecEnv(VecEnv):
    """`num_envs` copies of a Gymnasium env behind the `VecEnv` protocol.

    mode: "sync" (all copies in this process) or "async" (one worker process per copy; with
    `num_workers`, at most that many step at the same time).
    Box observations become float32; Discrete observations become one-hot vectors. Actions:
    Discrete (int64 (N,)) or Box (float32 (N, *shape), passed to the env unclipped).
    """

    def __init__(
        self,
        env_id: "str | Callable[[], gymnasium.Env]",
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        mode: str = "sync",
        num_workers: int | None = None,
        wrappers: list[str] | tuple[str, ...] = (),
        env_kwargs: dict | None = None,
    ):
        super().__init__(num_envs, device, seed)
        if mode not in ("sync", "async"):
            raise EnvConfigError(f"vector_env mode must be 'sync' or 'async', got {mode!r}")
        self.name = env_id
        self.mode = mode
        wrappers = tuple(wrappers)
        env_kwargs = dict(env_kwargs or {})
        for wrapper in wrappers:
            if ":" not in wrapper:
                raise EnvConfigError(f"wrapper {wrapper!r} must be an entry point 'package.module:ClassName'")
            _load(wrapper, "wrapper")  # fail here, clearly, rather than in a worker

        try:
            probe = make_single_env(env_id, wrappers, env_kwargs, render_mode=None)
        except TypeError as error:
            raise _bad_kwarg_error(env_id, error) from error
        except gymnasium.error.Error as error:
            raise EnvError(f"Gymnasium could not build {env_id!r}: {error}") from error
        try:
            self._configure_spaces(probe.observation_space, probe.action_space)
            render_modes = probe.metadata.get("render_modes", []) or []
            self.metadata = {"render_fps": probe.metadata.get("render_fps", 30)}
        finally:
            probe.close()
        render_mode = "rgb_array" if "rgb_array" in render_modes else None
        self.can_render = render_mode is not None
        if callable(env_id):
            render_mode = None  # a factory is called as given; it renders if it made its env with rgb_array
            self.can_render = getattr(probe, "render_mode", None) == "rgb_array"
            self.name = getattr(probe.spec, "id", None) or getattr(env_id, "__qualname__", "env factory")
        env_fns = [functools.partial(make_single_env, env_id, wrappers, env_kwargs, render_mode)] * num_envs
        if mode == "sync":
            self._vector_env = SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            self._vector_env = AsyncVectorEnv(
                env_fns, autoreset_mode=AutoresetMode.SAME_STEP, max_concurrency=num_workers
            )
        self._closed = False
        self._running_return = np.zeros(num_envs, dtype=np.float64)
        self._seed = seed if seed is not None else int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))
        self._last_obs = self.reset(self._seed)

    def _configure_spaces(self, observation_space: gymnasium.Space, action_space: gymnasium.Space) -> None:
        if isinstance(observation_space, gymnasium.spaces.Box):
            self._one_hot_obs = None
            self.single_observation_space = gymnasium.spaces.Box(
                observation_space.low.astype(np.float32), observation_space.high.astype(np.float32), dtype=np.float32
            )
        elif isinstance(observation_space, gymnasium.spaces.Discrete):
            self._one_hot_obs = (int(observation_space.n), int(observation_space.start))
            self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, shape=(int(observation_space.n),), dtype=np.float32)
        else:
            raise EnvConfigError(
                f"{self.name}: observation space {observation_space} is not supported; only Box and Discrete "
                f"are. Flatten it with a wrapper, e.g. wrappers=['gymnasium.wrappers:FlattenObservation']"
            )
        if isinstance(action_space, gymnasium.spaces.Discrete):
            self._action_start = int(action_space.start)
        elif isinstance(action_space, gymnasium.spaces.Box):
            self._action_start = None
        else:
            raise EnvConfigError(
                f"{self.name}: action space {action_space} is not supported; only Discrete and Box are"
            )
        self.single_action_space = action_space

    # Conversions ------------------------------------------------------------------------------

    def _obs_to_tensor(self, obs: np.ndarray) -> Tensor:
        if self._one_hot_obs is not None:
            size, start = self._one_hot_obs
            one_hot = np.zeros((self.num_envs, size), dtype=np.float32)
            one_hot[np.arange(self.num_envs), np.asarray(obs, dtype=np.int64) - start] = 1.0
            obs = one_hot
        return torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)

    def _actions_to_numpy(self, actions: Tensor | np.ndarray) -> np.ndarray:
        if isinstance(actions, Tensor):
            actions = actions.detach().cpu().numpy()
        actions = np.asarray(actions)
        if self._action_start is not None:
            if actions.size != self.num_envs:
                raise EnvError(f"{self.name}: expected {self.num_envs} discrete actions, got shape {actions.shape}")
            return actions.reshape(self.num_envs).astype(np.int64) + self._action_start
        shape = (self.num_envs, *self.single_action_space.shape)
        if actions.size != int(np.prod(shape)):
            raise EnvError(f"{self.name}: expected continuous actions of shape {shape}, got shape {actions.shape}")
        return actions.reshape(shape).astype(self.single_action_space.dtype)

    # Protocol ---------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Tensor:
        obs, _ = self._vector_env.reset(seed=seed)
        self.stats.reset()
        self._running_return[:] = 0.0
        return self._obs_to_tensor(obs)

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        obs, reward, terminated, truncated, info = self._vector_env.step(self._actions_to_numpy(actions))
        reward = np.asarray(reward, dtype=np.float64)
        done = np.logical_or(terminated, truncated)
        self._running_return += reward
        score = self._running_return.copy()
        if "score" in info:  # the env reports its own game score
            has_score = info.get("_score", np.ones(self.num_envs, dtype=bool))
            score[has_score] = np.asarray(info["score"], dtype=np.float64)[has_score]
        final_obs = np.array(obs, copy=True)
        if done.any():
            finished = np.flatnonzero(done)
            final_obs[finished] = np.stack([info["final_obs"][i] for i in finished])
            final_info = info.get("final_info", {})
            if "score" in final_info:
                has_score = final_info.get("_score", np.ones(self.num_envs, dtype=bool)) & done
                score[has_score] = np.asarray(final_info["score"], dtype=np.float64)[has_score]
        reward_tensor = torch.as_tensor(reward, dtype=torch.float32, device=self.device)
        terminated_tensor = torch.as_tensor(np.asarray(terminated, dtype=bool), device=self.device)
        truncated_tensor = torch.as_tensor(np.asarray(truncated, dtype=bool), device=self.device)
        self.stats.update(
            reward_tensor,
            torch.as_tensor(score, dtype=torch.float32, device=self.device),
            terminated_tensor | truncated_tensor,
        )
        self._running_return[done] = 0.0
        return (
            self._obs_to_tensor(obs),
            reward_tensor,
            terminated_tensor,
            truncated_tensor,
            {"final_obs": self._obs_to_tensor(final_obs)},
        )

    def render(self, index: int = 0) -> np.ndarray:
        index = self._check_render_index(index)
        if not self.can_render:
            raise EnvError(f"{self.name} cannot render RGB frames (its render_modes lack 'rgb_array')")
        if isinstance(self._vector_env, SyncVectorEnv):
            frame = self._vector_env.envs[index].render()
        else:
            frame = self._vector_env.call("render")[index]
        frame = np.asarray(frame)
        if frame.ndim == 2:
            frame = np.repeat(frame[:, :, None], 3, axis=2)
        return np.ascontiguousarray(frame[:, :, :3], dtype=np.uint8)

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self._vector_env.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

    def __repr__(self) -> str:
        return f"GymVecEnv({self.name!r}, num_envs={self.num_envs}, mode={self.mode!r}, device={self.device})"
