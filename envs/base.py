"""The protocol every environment follows, and the episode statistics every env reports.

A `VecEnv` holds `num_envs` copies of one game as tensors on one device. `step` takes a batch of
actions and returns a batch of observations, rewards and done flags; an env that finishes is
reset inside `step`, and the observation it ended on is kept in `info["final_obs"]`.

`EpisodeStats` keeps the running return / length / score of every env and the totals of the
episodes that finished, all on the device, so that stepping never waits for the host. The
trainer calls `drain()` once per update: one host sync, one `EpisodeSummary`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium
import numpy as np
import torch
from torch import Tensor


class EnvError(Exception):
    """Base class of every error raised by `envs` (unknown name, bad kwarg, bad device...)."""


class UnknownEnvError(EnvError, ValueError):
    """The environment name is neither built in, nor a Gymnasium id, nor an entry point."""


class EnvConfigError(EnvError, ValueError):
    """A keyword argument given to an environment is unknown or has a bad value."""


RECENT_EPISODES = 100  # EpisodeSummary.recent_* average over this many last finished episodes


@dataclass(frozen=True)
class EpisodeSummary:
    """Episodes finished since the previous `EpisodeStats.drain()`.

    The means and maxima are None when `count` is 0; the `recent_*` means cover the last
    `RECENT_EPISODES` finished episodes ever (not only since the last drain) and are None
    until one episode has finished.
    """

    count: int
    return_mean: float | None
    length_mean: float | None
    score_mean: float | None
    return_max: float | None
    score_max: float | None
    recent_return_mean: float | None
    recent_score_mean: float | None
    recent_length_mean: float | None = None


class EpisodeStats:
    """Running and finished-episode statistics of a batch of envs, kept on the device.

    `update` is called by the env inside every `step`; it only does tensor ops (no `.item()`,
    no boolean indexing), so it never makes the device wait for the host. `drain` copies the
    totals to the host once and restarts the since-last-drain counters.
    """

    def __init__(self, num_envs: int, device: torch.device | str, history: int = RECENT_EPISODES):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.history = history
        # Rows: return, length, score. One (3, N) tensor so that each update is a few ops.
        self.running = torch.zeros(3, num_envs, device=self.device)
        # Per-env totals of the episodes finished since the last drain: elementwise updates
        # are cheaper than reducing over the batch every step; drain() sums them. float32 is
        # exact for counts and lengths below 2**24 per env between two drains.
        self._finished_count = torch.zeros(num_envs, device=self.device)
        self._finished_sums = torch.zeros(3, num_envs, device=self.device)
        self._finished_max = torch.full((3, num_envs), -math.inf, device=self.device)
        self._minus_inf = torch.tensor(-math.inf, device=self.device)
        # Ring buffer of the last `history` finished episodes (rows as `running`). Column
        # `history` is scratch: it absorbs the writes of the unused slots of a step.
        self._recent = torch.zeros(3, history + 1, device=self.device)
        self._recent_written = torch.zeros((), dtype=torch.int64, device=self.device)
        self._slot_offsets = torch.arange(history, device=self.device)
        self._scratch_slot = torch.tensor(history, device=self.device)

    @property
    def running_return(self) -> Tensor:
        """(N,) return of the episode in progress in every env."""
        return self.running[0]

    @property
    def running_length(self) -> Tensor:
        """(N,) steps taken in the episode in progress in every env."""
        return self.running[1]

    @property
    def running_score(self) -> Tensor:
        """(N,) game score of the episode in progress in every env."""
        return self.running[2]

    def reset(self) -> None:
        """Forget the episodes in progress (called when the env is reset)."""
        self.running.zero_()

    def update(self, reward: Tensor, score: Tensor, done: Tensor) -> None:
        """Account for one step of every env.

        reward: (N,) this step's reward. score: (N,) the game score of the episode so far,
        counting this step (pipes passed, food eaten...). done: (N,) bool, the episode ended
        on this step (terminated or truncated); its totals are recorded and its running
        values restart from zero.
        """
        self.running[0].add_(reward)
        self.running[1].add_(1.0)
        self.running[2].copy_(score)
        done_float = done.to(torch.float32)
        self._finished_count.add_(done_float)
        self._finished_sums.addcmul_(self.running, done_float)
        torch.maximum(self._finished_max, torch.where(done, self.running, self._minus_inf), out=self._finished_max)
        self._record_recent(done)
        self.running.mul_(1.0 - done_float)

    def _record_recent(self, done: Tensor) -> None:
        # Up to `history` finished envs (a fixed-size nonzero, so no host sync) take the next
        # ring slots; unused slots write into the scratch column.
        finished_envs = torch.nonzero_static(done, size=self.history, fill_value=-1).squeeze(1)
        used = finished_envs >= 0
        slots = torch.remainder(self._recent_written + self._slot_offsets, self.history)
        slots = torch.where(used, slots, self._scratch_slot)
        self._recent[:, slots] = self.running[:, finished_envs.clamp(min=0)]
        self._recent_written.add_(used.sum())

    def drain(self) -> EpisodeSummary:
        """Summarise the episodes finished since the last drain (one host sync) and restart."""
        totals = torch.cat(
            (
                self._finished_count.sum(dtype=torch.float64).reshape(1),
                self._finished_sums.sum(dim=1, dtype=torch.float64),
                self._finished_max.amax(dim=1).double(),
                self._recent_written.double().reshape(1),
                self._recent[:, : self.history].double().flatten(),
            )
        )
        host = totals.cpu().numpy()  # the one host sync
        count = int(round(host[0]))
        sum_return, sum_length, sum_score = host[1:4].tolist()
        max_return, _, max_score = host[4:7].tolist()
        written = int(round(host[7]))
        recent = host[8:].reshape(3, self.history)[:, : min(written, self.history)]
        self._finished_count.zero_()
        self._finished_sums.zero_()
        self._finished_max.fill_(-math.inf)
        has_recent = recent.shape[1] > 0
        return EpisodeSummary(
            count=count,
            return_mean=sum_return / count if count else None,
            length_mean=sum_length / count if count else None,
            score_mean=sum_score / count if count else None,
            return_max=max_return if count else None,
            score_max=max_score if count else None,
            recent_return_mean=float(recent[0].mean()) if has_recent else None,
            recent_score_mean=float(recent[2].mean()) if has_recent else None,
            recent_length_mean=float(recent[1].mean()) if has_recent else None,
        )


class UniformNoise:
    """Up to 4 uniform values per env from one 64-bit random draw per env.

    Resets need fresh random numbers every step for every env (only the finished ones use
    them, but picking those out would need a host sync). Drawing one int64 per env and
    cutting it into four 15-bit fields costs about half of `torch.rand(4, N)` on a CPU; the
    values are uniform on a grid of 2**15 points, fine enough for start states and spawns.
    """

    FIELD_BITS = 15

    def __init__(self, num_envs: int, generator: torch.Generator, device: torch.device):
        self.generator = generator
        self._bits = torch.empty(num_envs, dtype=torch.int64, device=device)
        shifts = torch.arange(4, device=device, dtype=torch.int64) * self.FIELD_BITS
        self._shifts = shifts.reshape(4, 1)

    def draw(self, num_fields: int, low: float = 0.0, high: float = 1.0, per_env: bool = False) -> Tensor:
        """(num_fields, N) float32 values uniform in [low, high); (N, num_fields) if per_env."""
        self._bits.random_(generator=self.generator)
        if per_env:
            fields = self._bits.unsqueeze(1) >> self._shifts[:num_fields].t()
        else:
            fields = self._bits >> self._shifts[:num_fields]
        fields.bitwise_and_((1 << self.FIELD_BITS) - 1)
        scale = (high - low) / (1 << self.FIELD_BITS)
        return fields.to(torch.float32).mul_(scale).add_(low)


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


class VecEnv:
    """A batch of `num_envs` copies of one game, stepped together with tensor ops.

    Subclasses set `single_observation_space`, `single_action_space` and implement
    `_reset_all`, `step` and `render`. Observations are float32 (N, *obs_shape); discrete
    actions are int64 (N,), continuous ones float32 (N, act_dim).
    """

    num_envs: int
    device: torch.device
    single_observation_space: gymnasium.spaces.Box
    single_action_space: gymnasium.spaces.Discrete | gymnasium.spaces.Box
    stats: EpisodeStats
    name: str = "env"
    metadata: dict = {"render_fps": 30}
    # False keeps a finished env on its last state until reset() (the single-env Gymnasium
    # wrapper and the play command use it to show the crash); training always auto-resets.
    auto_reset: bool = True

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int | None = None):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise EnvConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
        self.num_envs = num_envs
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
        self.stats.reset()
        return self._reset_all()

    def _reset_all(self) -> Tensor:
        raise NotImplementedError

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        raise NotImplementedError

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

    def _discrete_actions(self, actions: Tensor | np.ndarray | list) -> Tensor:
        """Check the shape of a batch of discrete actions (no host sync) and put it on the device."""
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

    def __enter__(self) -> "VecEnv":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
