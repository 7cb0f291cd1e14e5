"""The protocol every environment follows: `VecEnv`.

A `VecEnv` holds `num_envs` copies of one game as tensors on one device. `step` takes a batch of
actions and returns a batch of observations, rewards and done flags; an env that finishes is
reset inside `step`, and the observation it ended on is kept in `info["final_obs"]`. That step
is written once, in `VecEnv.step`; a game supplies its physics and observations as three hooks.

The rollout steps every env through three batched methods declared here with defaults that work
for any env (`step_groups`, `send`, `recv_views`); an env with a faster way overrides them (the
worker pool hands back views of its shared memory, and steps one half of the batch while the
policy acts on the other). An env whose games forbid some actions in some states says which are
allowed through `action_masks` (None here: every action always is). Its neighbours: `errors.py`, `names.py` (did you mean), `options.py`
(option and device checks), `stats.py` (EpisodeStats), `noise.py` (UniformNoise).
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs.errors import EnvConfigError, EnvError
from envs.options import positive_int, resolve_device
from envs.stats import EpisodeStats

StepResult = tuple[Tensor, Tensor, Tensor, Tensor, dict]  # obs, reward, terminated, truncated, info


class VecEnv:
    """A batch of `num_envs` copies of one game, stepped together with tensor ops.

    A game sets `single_observation_space`, `single_action_space` and implements `_reset_all`
    (start every env, return the observations), `render`, and the three hooks of `step`:
    `_advance` (its physics and rewards), `_observe` (its observation) and `_restart` (a new
    episode in the finished envs). A wrapper of other vector envs (`GymVecEnv`) overrides `step`
    instead. Observations are float32 (N, *obs_shape); discrete actions are int64 (N,),
    continuous ones float32 (N, act_dim).
    """

    num_envs: int
    device: torch.device
    single_observation_space: gymnasium.spaces.Box
    single_action_space: gymnasium.spaces.Discrete | gymnasium.spaces.Box
    stats: EpisodeStats
    name: str = "env"
    # The unit of the game score in `stats` ("pipes"): what the studio shows first, with this
    # word (envs.registry.score_unit reads it). None: the score is the episode return (it is for
    # a Gymnasium env that reports no info["score"]), so it is shown and labelled as the return.
    score_unit: str | None = None
    # Options that only shape training (a curriculum, e.g. Flappy Bird's `hard_pipes`): evaluation,
    # the Watch view and the games benchmark play without them (envs.registry.played_env_kwargs).
    training_only_options: tuple[str, ...] = ()
    metadata: dict = {"render_fps": 30}
    # False keeps a finished env on its last state until reset() (the single-env Gymnasium
    # wrapper and the play command use it to show the crash); training always auto-resets.
    auto_reset: bool = True
    _sent: StepResult | None = None  # the default `send`'s step, until `recv` hands it over

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int | None = None):
        self.num_envs = positive_int("num_envs", num_envs)
        self.device = resolve_device(device)
        self.generator = torch.Generator(device=self.device)
        self._seed_generator(seed)
        self.stats = EpisodeStats(num_envs, self.device)

    def _seed_generator(self, seed: int | None) -> None:
        if seed is None:
            self.generator.seed()  # fresh entropy from the OS
        else:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise EnvConfigError(f"seed must be a non-negative integer or None, got {seed!r}")
            self.generator.manual_seed(int(seed))

    def reset(self, seed: int | None = None) -> Tensor:
        """Start a new episode in every env; `seed` (if given) reseeds all randomness."""
        if seed is not None:
            self._seed_generator(seed)
        self._sent = None
        self.stats.reset()
        return self._reset_all()

    def _reset_all(self) -> Tensor:
        raise NotImplementedError

    def step(self, actions: Tensor) -> StepResult:
        """Move every env one step: (obs, reward, terminated, truncated, {"final_obs": ...}).

        The one step of every native game. A finished env (terminated or truncated) starts a
        new episode at once unless `auto_reset` is False; `obs` is then its new episode's first
        observation and `info["final_obs"]` the one it ended on (the same tensor as `obs` when
        `auto_reset` is False). Nothing here but the game's hooks, one `|` and the statistics, as
        with few envs every torch op costs microseconds.
        """
        reward, score, terminated, truncated = self._advance(self._check_actions(actions))
        done = terminated | truncated
        self.stats.update(reward, score, done)
        final_obs = self._observe(done)
        obs = self._restart(done, final_obs) if self.auto_reset else final_obs
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The game's physics for one step of every env, written into its state:
        (reward float32, score float32 of the episode so far, terminated bool, truncated bool),
        each (N,). The envs that finish keep their final state until `_restart`."""
        raise NotImplementedError

    def _observe(self, done: Tensor) -> Tensor:
        """(N, *obs_shape) observation of every env as `_advance` left it: for the `done` envs,
        the observation their episode ended on (a game may treat them apart, e.g. give them no
        new food). Must be a new tensor, or one the game no longer writes in place."""
        raise NotImplementedError

    def _restart(self, done: Tensor, final_obs: Tensor) -> Tensor:
        """Start a new episode in the `done` envs (the others carry on) and return every env's
        observation: `final_obs` for the others, the first of the new episode for `done`."""
        raise NotImplementedError

    # Batched stepping: what the rollout calls (trainer/algos/rollout.py) ------------------------

    @property
    def step_groups(self) -> tuple[slice, ...]:
        """The groups of envs that `send` / `recv` step, as slices of the batch: one group, the
        whole batch, unless the env can step a group while its caller works on another (the
        async worker pool: two halves)."""
        return (slice(0, self.num_envs),)

    def step_views(self, actions: Tensor) -> StepResult:
        """`step` for a caller that copies the results before the next step: they may be views
        of the env's own memory (the worker pool's shared arrays), which saves a copy of each.
        Here, `step` itself."""
        return self.step(actions)

    def send(self, group: int, actions: Tensor) -> None:
        """Start a step of the envs `step_groups[group]` with their actions; `recv(group)` hands
        back its results. Here (one group): the step is taken now and kept for `recv`."""
        self._check_send(group)
        self._sent = self.step(actions)

    def _check_send(self, group: int) -> None:
        """The errors of the one-group `send`: another group, or a step not yet received."""
        if group != 0:
            raise EnvError(f"{self.name} steps its envs in one group (0), got group {group!r}")
        if self._sent is not None:
            raise EnvError(f"{self.name}: send(0, ...) twice without recv(0) in between")

    def recv(self, group: int) -> StepResult:
        """The results of the step `send(group, ...)` started, for the envs `step_groups[group]`:
        (obs, reward, terminated, truncated, {"final_obs": ...}) as `step` gives them."""
        sent = self._sent
        if group != 0 or sent is None:
            raise EnvError(f"{self.name}: recv({group!r}) without send({group!r}, ...) before it")
        self._sent = None
        return sent

    def recv_views(self, group: int) -> StepResult:
        """`recv` for a caller that copies the results before it sends the group again: they may
        be views of the env's memory (as `step_views`). Here, `recv` itself."""
        return self.recv(group)

    # Action masks -------------------------------------------------------------------------------

    def action_masks(self) -> Tensor | None:
        """Which actions each env may take now: a bool tensor (num_envs, n) for a Discrete action
        space of n actions, True where allowed, for the observations the last `reset` / `step`
        (or `recv` of a group: its rows) handed back; None when this env never forbids an action
        (the default, and what keeps masking free for every env that has none). Every row has at
        least one True. It may be a view of the env's memory, valid until the next step: copy it
        to keep it. The policy gives forbidden actions probability 0 (sb3-contrib's
        `action_masks()`; a Gymnasium env reports its own through `info["action_mask"]`)."""
        return None

    # ----------------------------------------------------------------------------------------------

    def render(self, index: int = 0) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} cannot render")

    def game_score(self) -> Tensor:
        """(N,) score of each env's current episode (after an auto-reset: of the new one)."""
        return self.stats.running_score

    def close(self) -> None:
        """Release windows, processes and other resources (idempotent)."""

    # Helpers for subclasses -------------------------------------------------------------------

    def _check_render_index(self, index: int) -> int:
        if not isinstance(index, (int, np.integer)) or not 0 <= index < self.num_envs:
            raise EnvError(f"render index must be in 0..{self.num_envs - 1}, got {index!r}")
        return int(index)

    def _check_actions(self, actions: Tensor | np.ndarray | list) -> Tensor:
        """Check the shape of a batch of discrete actions (no host sync) and put it on the device
        (a game with continuous actions overrides this)."""
        if not isinstance(actions, Tensor):
            actions = torch.as_tensor(np.asarray(actions))
        if actions.shape != (self.num_envs,):
            if actions.numel() == self.num_envs:
                actions = actions.reshape(self.num_envs)
            else:
                raise EnvError(
                    f"{self.name}: expected actions of shape ({self.num_envs},), one per env, "
                    f"got shape {tuple(actions.shape)}"
                )
        if actions.device != self.device:
            actions = actions.to(self.device, non_blocking=True)
        return actions

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
