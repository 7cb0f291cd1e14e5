"""Any Gymnasium environment as a `VecEnv`, through Gymnasium's own vector envs.

`GymVecEnv("Acrobot-v1", num_envs=8)` builds 8 copies with `gymnasium.make` (or, for an entry
point `package.module:ClassName`, by calling the class), applies the user's wrappers to every
copy, and steps them in this process (mode `sync`: the worker pool's own loop, envs/pool_worker.py
`LocalEnvs`), with Gymnasium's `AsyncVectorEnv` (`async`: one process per copy) or with our
shared-memory `WorkerPool` (`pool`: `num_workers` processes sharing the copies; `async_pool`:
the same, in two halves that step while the policy acts on the other). Observations, rewards and done flags come back as
tensors on the chosen device; finished episodes feed the same `EpisodeStats` as the native
envs, with `score` taken from the env's `info["score"]` when it reports one, else the return.
A Discrete-action env that reports `info["action_mask"]` (at reset, and with each step: the mask
of the observation it returns) has its masks handed on by `action_masks`, as sb3-contrib's
MaskablePPO reads them; one that reports none costs nothing for it.

Every step crosses from tensors to numpy and back and each copy is a Python object stepped
one at a time, so the pool is the fast path for a user's own game: its cost is the env's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode
from torch import Tensor

from envs.base import VecEnv
from envs.cores import resolve_num_workers
from envs.errors import EnvConfigError, EnvError
from envs.gym_build import bad_kwarg_error, load_entry_point, make_single_env, vec_spaces
from envs.pool import DEFAULT_STEP_TIMEOUT_S, WorkerPool
from envs.pool_worker import LocalEnvs, copy_vector_masks, episode_scores

MODES = ("sync", "async", "pool", "async_pool")


class GymVecEnv(VecEnv):
    """`num_envs` copies of a Gymnasium env behind the `VecEnv` protocol.

    mode: "sync" (all copies in this process), "async" (Gymnasium's: one worker process per
    copy; with `num_workers`, at most that many step at the same time), "pool" (`num_workers`
    processes, 'auto': one per usable core, sharing the copies over shared memory) or
    "async_pool" (the pool in two halves: `send(group, actions)` / `recv(group)` let the
    policy act on one half while the other steps; `step` still steps every env).
    step_timeout: pool modes: seconds a worker may take for one step before the run ends.
    Box observations become float32; Discrete observations become one-hot vectors. Actions:
    Discrete (int64 (N,)) or Box (float32 (N, *shape), passed to the env unclipped).
    """

    def __init__(
        self,
        env_id: str | Callable[[], gymnasium.Env],
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        mode: str = "sync",
        num_workers: int | str | None = None,
        wrappers: list[str] | tuple[str, ...] = (),
        env_kwargs: dict | None = None,
        step_timeout: float = DEFAULT_STEP_TIMEOUT_S,
    ):
        super().__init__(num_envs, device, seed)
        if mode not in MODES:
            raise EnvConfigError(f"vector_env mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.name = env_id
        self.mode = mode
        wrappers = tuple(wrappers)
        env_kwargs = dict(env_kwargs or {})
        for wrapper in wrappers:
            if ":" not in wrapper:
                raise EnvConfigError(f"wrapper {wrapper!r} must be an entry point 'package.module:ClassName'")
            load_entry_point(wrapper, "wrapper")  # fail here, clearly, rather than in a worker

        try:
            probe = make_single_env(env_id, wrappers, env_kwargs, render_mode=None)
        except TypeError as error:
            raise bad_kwarg_error(env_id, error) from error
        except gymnasium.error.Error as error:
            raise EnvError(f"Gymnasium could not build {env_id!r}: {error}") from error
        try:
            self.single_observation_space, self._one_hot_obs, self._action_start = vec_spaces(
                self.name, probe.observation_space, probe.action_space
            )
            self.single_action_space = probe.action_space
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
        env_fn = functools.partial(make_single_env, env_id, wrappers, env_kwargs, render_mode)
        self._vector_env = self._pool = self._views = None
        # async_pool: a step's halves meet here for the statistics (reward, score, done)
        self._step_stats = torch.zeros(3, num_envs, device=self.device)
        self._groups = (slice(0, num_envs),)  # `step_groups`: async_pool steps two halves
        obs_shape = () if self._one_hot_obs is not None else self.single_observation_space.shape
        mask_size = int(self.single_action_space.n) if self._action_start is not None else 0
        self._masks: np.ndarray | None = None  # the async mode's copy of the envs' action masks
        self._mask_view: Tensor | None = None  # `action_masks` over them, once the envs report masks
        if mode == "sync":
            self._pool = LocalEnvs(
                env_fn, num_envs, obs_shape, self.single_action_space.shape, self.single_action_space.dtype, mask_size
            )
            self._group_received = [False]
            self._views = self._shared_views()
        elif mode == "async":
            self._vector_env = AsyncVectorEnv(
                [env_fn] * num_envs,
                autoreset_mode=AutoresetMode.SAME_STEP,
                max_concurrency=None if num_workers is None else resolve_num_workers(num_workers, num_envs),
            )
            self._masks = np.ones((num_envs, mask_size), dtype=np.bool_)
        else:
            groups = 2 if mode == "async_pool" else 1
            workers = max(groups, resolve_num_workers(num_workers, num_envs))
            self._pool = WorkerPool(
                env_fn,
                num_envs,
                workers,
                obs_shape,
                self.single_action_space.shape,
                self.single_action_space.dtype,
                groups=groups,
                step_timeout=step_timeout,
                mask_size=mask_size,
            )
            if groups == 2:
                self._groups = tuple(self._pool.group_envs)
            self._group_received = [False] * groups
            self._views = self._shared_views()
            if groups == 2:  # each group's slices, made once
                self._group_stats = [self._step_stats[:, envs].unbind(0) for envs in self._groups]
                if self._views is not None:
                    self._group_views = [
                        {name: view[envs] for name, view in self._views.items()} for envs in self._groups
                    ]
        self.num_workers = num_envs if mode == "async" else self._pool.num_workers
        self._closed = False
        self._running_return = np.zeros(
            num_envs, dtype=np.float64
        )  # Gymnasium's vectorisers (the pool's: in its workers)
        self._seed = seed if seed is not None else int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))
        self._last_obs = self.reset(self._seed)

    # Conversions ------------------------------------------------------------------------------

    def _obs_to_tensor(self, obs: np.ndarray) -> Tensor:
        """A new tensor (never a view of the pool's shared memory, which the next step rewrites)."""
        if self._one_hot_obs is not None:
            size, start = self._one_hot_obs
            one_hot = np.zeros((len(obs), size), dtype=np.float32)
            one_hot[np.arange(len(obs)), np.asarray(obs, dtype=np.int64) - start] = 1.0
            return torch.from_numpy(one_hot).to(self.device)
        return self._tensor(obs, np.float32)

    def _tensor(self, array: np.ndarray, dtype: type, copy: bool = True) -> Tensor:
        """`array` on the device: from_numpy + one copy (several times cheaper than
        torch.tensor(array) for the small arrays of a step); copy=False: a view where it can be,
        for what is read at once."""
        return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(self.device, copy=copy)

    def _actions_to_numpy(self, actions: Tensor | np.ndarray, count: int | None = None) -> np.ndarray:
        count = self.num_envs if count is None else count
        if isinstance(actions, Tensor):
            actions = actions.detach().cpu().numpy()
        actions = np.asarray(actions)
        if self._action_start is not None:
            if actions.size != count:
                raise EnvError(f"{self.name}: expected {count} discrete actions, got shape {actions.shape}")
            actions = actions.reshape(count).astype(np.int64, copy=False)
            return actions + self._action_start if self._action_start else actions
        shape = (count, *self.single_action_space.shape)
        if actions.size != int(np.prod(shape)):
            raise EnvError(f"{self.name}: expected continuous actions of shape {shape}, got shape {actions.shape}")
        return actions.reshape(shape).astype(self.single_action_space.dtype, copy=False)

    # Protocol ---------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Tensor:
        if self._pool is not None:
            obs = self._pool.reset(seed)
            self._group_received = [False] * len(self._group_received)
            masks, reported = self._pool.shared.action_mask, self._pool.shared.mask_reported.any()
        else:
            obs, info = self._vector_env.reset(seed=seed)
            masks, reported = self._masks, copy_vector_masks(self._masks, info)
        self._mask_view = torch.from_numpy(masks) if reported and masks.shape[1] else None
        self._sent = None
        self.stats.reset()
        self._running_return[:] = 0.0
        return self._obs_to_tensor(obs)

    def action_masks(self) -> Tensor | None:
        """(num_envs, n) bool: each env's last `info["action_mask"]` (all True for an env that
        reported none), or None when no env reported one at reset. On the CPU, a view of the
        shared memory the next step rewrites."""
        view = self._mask_view
        if view is None or self.device.type == "cpu":
            return view
        return view.to(self.device)

    def _gymnasium_step(self, actions: np.ndarray) -> tuple:
        """One step of Gymnasium's vector env as the pool's workers report it: (obs, final_obs,
        reward, terminated, truncated, done, score), numpy arrays of N."""
        obs, reward, terminated, truncated, info = self._vector_env.step(actions)
        done = np.logical_or(terminated, truncated)
        if self._mask_view is not None:  # same-step auto-reset: a finished env's info is its reset's
            copy_vector_masks(self._masks, info)
        env_score = np.zeros(self.num_envs, dtype=np.float64)
        has_score = np.zeros(self.num_envs, dtype=bool)
        if "score" in info:  # the env reports its own game score
            has_score = np.asarray(info.get("_score", np.ones(self.num_envs, dtype=bool)), dtype=bool).copy()
            env_score[has_score] = np.asarray(info["score"], dtype=np.float64)[has_score]
        final_obs = np.array(obs, copy=True)
        if done.any():
            finished = np.flatnonzero(done)
            final_obs[finished] = np.stack([info["final_obs"][i] for i in finished])
            final_info = info.get("final_info", {})
            has_score &= ~done
            if "score" in final_info:
                has_final = np.asarray(final_info.get("_score", np.ones(self.num_envs, dtype=bool)), dtype=bool) & done
                env_score[has_final] = np.asarray(final_info["score"], dtype=np.float64)[has_final]
                has_score |= has_final
        reward = np.asarray(reward, dtype=np.float64)
        score = episode_scores(self._running_return, reward, done, env_score, has_score)
        return obs, final_obs, reward, terminated, truncated, done, score

    def _shared_views(self) -> dict[str, Tensor] | None:
        """Tensors over the pool's shared arrays (made once: views cost nothing to read), for
        `step_views`; None where a step's results need converting anyway (one-hot
        observations, a device other than the CPU)."""
        if self.device.type != "cpu" or self._one_hot_obs is not None:
            return None
        shared = self._pool.shared
        return {
            name: torch.from_numpy(getattr(shared, name))
            for name in ("obs", "final_obs", "reward", "terminated", "truncated", "done", "score")
        }

    def _pool_results(self, envs: slice) -> tuple:
        shared = self._pool.shared
        return (
            shared.obs[envs],
            shared.final_obs[envs],
            shared.reward[envs],
            shared.terminated[envs],
            shared.truncated[envs],
            shared.done[envs],
            shared.score[envs],
        )

    def _results(self, results: tuple) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor, dict], Tensor, Tensor]:
        """The step's (obs, reward, terminated, truncated, info) as new tensors on the device
        (copies: the pool's shared memory is rewritten by the next step), and the (score, done)
        the statistics read right away (views of it where they can be)."""
        obs, final_obs, reward, terminated, truncated, done, score = results
        out = (
            self._obs_to_tensor(obs),
            self._tensor(reward, np.float32),
            self._tensor(terminated, np.bool_),
            self._tensor(truncated, np.bool_),
            {"final_obs": self._obs_to_tensor(final_obs)},
        )
        return out, self._tensor(score, np.float32, copy=False), self._tensor(done, np.bool_, copy=False)

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        if self._pool is not None and self._views is not None:
            obs, reward, terminated, truncated, info = self.step_views(actions)
            return (
                obs.clone(),
                reward.clone(),
                terminated.clone(),
                truncated.clone(),
                {"final_obs": info["final_obs"].clone()},
            )
        actions = self._actions_to_numpy(actions)
        if self._pool is not None:
            self._pool.step(actions)
            results = self._pool_results(slice(None))
        else:
            results = self._gymnasium_step(actions)
        out, score, done = self._results(results)
        self.stats.update(out[1], score, done)
        return out

    def step_views(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        """`step`, but the tensors may be views of the pool's shared memory, valid until the
        next step: no copies, for a caller that copies them itself (the rollout writes them
        straight into its buffer). `step` where there is nothing to save."""
        if self._pool is None or self._views is None:
            return self.step(actions)
        self._pool.step(self._actions_to_numpy(actions))
        views = self._views
        self.stats.update(views["reward"], views["score"], views["done"])
        return views["obs"], views["reward"], views["terminated"], views["truncated"], {"final_obs": views["final_obs"]}

    @property
    def step_groups(self) -> tuple[slice, ...]:
        """async_pool: the two halves of the batch, each stepping while the caller works on the
        other; every other mode: one group, the whole batch."""
        return self._groups

    def send(self, group: int, actions: Tensor) -> None:
        """Start a step of the envs `step_groups[group]` with their actions: async_pool hands it
        to the group's workers and returns; the other modes step now (`step_views`)."""
        if len(self._groups) == 1:
            self._check_send(group)
            self._sent = self.step_views(actions)
            return
        envs = self._groups[group]
        self._pool.send(group, self._actions_to_numpy(actions, envs.stop - envs.start))

    def recv(self, group: int) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        """Wait for `group`'s step and return its (obs, reward, terminated, truncated, info) for
        the envs `step_groups[group]`, as new tensors; async_pool's statistics count a step once
        every group has reported it."""
        obs, reward, terminated, truncated, info = self.recv_views(group)
        if self._views is None:
            return obs, reward, terminated, truncated, info  # already copies
        return (
            obs.clone(),
            reward.clone(),
            terminated.clone(),
            truncated.clone(),
            {"final_obs": info["final_obs"].clone()},
        )

    def recv_views(self, group: int) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        """`recv`, but the tensors may be views of the shared memory, valid until the group is
        sent again (as `step_views`)."""
        if len(self._groups) == 1:
            return super().recv(group)  # what `send` kept
        self._pool.recv(group)
        envs = self._groups[group]
        if self._views is not None:
            views = self._group_views[group]
            out = (
                views["obs"],
                views["reward"],
                views["terminated"],
                views["truncated"],
                {"final_obs": views["final_obs"]},
            )
            score, done = views["score"], views["done"]
        else:
            out, score, done = self._results(self._pool_results(envs))
        reward_row, score_row, done_row = self._group_stats[group]
        reward_row.copy_(out[1])  # kept: the group's memory is rewritten once it is sent again
        score_row.copy_(score)
        done_row.copy_(done)
        self._group_received[group] = True
        if all(self._group_received):
            self._group_received = [False] * len(self._group_received)
            self.stats.update(self._step_stats[0], self._step_stats[1], self._step_stats[2])
        return out

    def render(self, index: int = 0) -> np.ndarray:
        index = self._check_render_index(index)
        if not self.can_render:
            raise EnvError(f"{self.name} cannot render RGB frames (its render_modes lack 'rgb_array')")
        if self._pool is not None:
            frame = self._pool.render(index)
        else:
            frame = self._vector_env.call("render")[index]
        frame = np.asarray(frame)
        if frame.ndim == 2:
            frame = np.repeat(frame[:, :, None], 3, axis=2)
        return np.ascontiguousarray(frame[:, :, :3], dtype=np.uint8)

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            (self._pool or self._vector_env).close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

    def __repr__(self) -> str:
        return f"GymVecEnv({self.name!r}, num_envs={self.num_envs}, mode={self.mode!r}, num_workers={self.num_workers}, device={self.device})"
