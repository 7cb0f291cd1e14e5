"""The protocol every environment follows, and the episode statistics every env reports.

A `VecEnv` holds `num_envs` copies of one game as tensors on one device. `step` takes a batch of
actions and returns a batch of observations, rewards and done flags; an env that finishes is
reset inside `step`, and the observation it ended on is kept in `info["final_obs"]`. That step
is written once, in `VecEnv.step`; a game supplies its physics and observations as three hooks.

`EpisodeStats` keeps the running return / length / score of every env and the totals of the
episodes that finished, all on the device, so that stepping never waits for the host. The
trainer calls `drain()` once per update: one host sync, one `EpisodeSummary`.
"""
from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
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


# How alike (difflib's ratio) a name and a known one must be for "Did you mean ...?". Typos score
# 0.85-0.95 (`flapy_bird`, `Acrobat-v1`, `grdi_size`); at difflib's default 0.6, unrelated names
# got confident advice (`NotAnEnv-v9` -> 'Snake-v0' at 0.53).
CLOSE_ENOUGH = 0.75


def closest_name(word: object, candidates: Iterable[str]) -> str | None:
    """The known name `word` was probably meant to be, or None when none is close.

    The one rule for every "Did you mean ...?" (env names, env options, config keys, choices):
    case-insensitive, a difflib ratio of at least CLOSE_ENOUGH, else a known name of 4+ letters
    that contains the word or is contained in it (`timesteps` -> `total_timesteps`).
    """
    text = str(word)[:64].strip().lower()
    spelled = {}
    for candidate in candidates:
        spelled.setdefault(candidate.lower(), candidate)
    close = difflib.get_close_matches(text, list(spelled), n=1, cutoff=CLOSE_ENOUGH)
    if close:
        return spelled[close[0]]
    if len(text) >= 4:
        for lowered, candidate in spelled.items():
            if len(lowered) >= 4 and (text in lowered or lowered in text):
                return candidate
    return None


def did_you_mean(word: object, candidates: Iterable[str], prefix: str = "") -> str:
    """' Did you mean 'x'?' for the closest name (with `prefix` before it), else ''."""
    close = closest_name(word, candidates)
    return f" Did you mean {prefix + close!r}?" if close else ""


def positive_int(name: str, value: object) -> int:
    """`value` if it is a whole number >= 1 (not a bool), else an EnvConfigError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EnvConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def finite_number(name: str, value: object) -> float:
    """`value` as a float if it is a finite number (not a bool), else an EnvConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EnvConfigError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def size_pair(name: str, value: object, low: int, high: int) -> tuple[int, int]:
    """(height, width) from an int (a square) or a [height, width] pair, each in low..high."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in value)
    ):
        raise EnvConfigError(f"{name} must be an integer or [height, width], each {low}..{high}, got {value!r}")
    return int(value[0]), int(value[1])


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
    no boolean indexing), so it never makes the device wait for the host. It is also only five
    ops, as on a CPU with few envs each op costs microseconds whatever its size: a step writes
    the values of the episodes that finished into a row of a `StepLog`, and `flush` folds the
    whole log into the totals, the maxima and the recent-episodes window, a dozen ops every
    `StepLog.capacity` steps. `drain` flushes, copies the totals to the host once and restarts
    the since-last-drain counters.
    """

    def __init__(self, num_envs: int, device: torch.device | str, history: int = RECENT_EPISODES):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.history = history
        # Rows: return, length, score. One (3, N) tensor so that each update is a few ops.
        self.running = torch.zeros(3, num_envs, device=self.device)
        self._running_rows = self.running.unbind(0)  # views, made once rather than every step
        self._one = torch.ones((), device=self.device)  # a tensor operand is cheaper than 1.0
        self._log = StepLog(num_envs, self.device)
        # The last logged row, saved by `flush` (which then uses the log as scratch): `finished`.
        self._last_finished = torch.zeros(3, num_envs, device=self.device)
        # Episodes finished since the last drain, up to the last flush; the sums over all envs
        # are float64 (float32 is exact for integers below 2**24 only).
        self._episode_count = torch.zeros((), dtype=torch.int64, device=self.device)
        self._episode_sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        self._episode_max = torch.full((2,), -math.inf, device=self.device)  # return, score
        # Ring buffer of the last `history` finished episodes (rows as `running`): the episode
        # finished k-th ever is in column k % history. Column `history` is scratch: it absorbs
        # the writes of the unused slots of a flush.
        self._recent = torch.zeros(3, history + 1, device=self.device)
        self._recent_written = torch.zeros((), dtype=torch.int64, device=self.device)
        self._newest_first = torch.arange(history, device=self.device)
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

    @property
    def finished(self) -> Tensor:
        """(3, N) return, length and score (rows as `running`) of the episodes that ended on the
        last step, in their env's column; 0 in the columns of the envs that did not finish.

        A view that the following steps overwrite: copy it (`.cpu()`, `.clone()`) to keep it.
        Free to keep: it is the step log's last row, or the copy `flush` saved of it.
        """
        row = self._log.last_row()
        return self._last_finished if row is None else row

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
        running_return, running_length, running_score = self._running_rows
        running_return.add_(reward)
        running_length.add_(self._one)
        running_score.copy_(score)
        finished = torch.mul(self.running, done, out=self._log.next_row())  # 0 where not done
        self.running.sub_(finished)  # finished envs restart from 0 (x - x), the rest keep x (x - 0)
        if self._log.is_full():
            self.flush()

    def flush(self) -> None:
        """Fold the logged steps into the finished-episode totals (tensor ops only, no host sync).

        `update` and `drain` call it; call it too before copying this object's tensors (as a
        checkpoint does), since the log is not one of them.
        """
        last_row = self._log.last_row()
        finished = self._log.take()
        if finished is None:
            return
        self._last_finished.copy_(last_row)  # one op per flush, so that `finished` survives it
        # Sums per env first (a few episodes each: exact for whole numbers), then over envs.
        self._episode_sums.add_(finished.sum(dim=1).sum(dim=1, dtype=torch.float64))
        finished = finished.flatten(1)  # (3, steps * N): step by step, env by env
        done = finished[1].bool()  # a finished episode lasted at least one step; the rest are 0
        count = done.sum()
        self._episode_count.add_(count)
        self._record_recent(finished, done, count)
        # Maxima of the finished episodes only: add 0 to them and -inf to the other entries
        # (1 - 1/x for x = 1 or 0). In place, now that the ring buffer has its values, as the
        # log is scratch once taken: arithmetic rather than torch.where, and no new tensor of
        # the log's size, are several times faster on a CPU (big new tensors cost page faults).
        exclude_others = finished[1].clamp_(max=1.0).reciprocal_().neg_().add_(1.0)
        return_and_score = finished[0::2].add_(exclude_others)
        torch.maximum(self._episode_max, return_and_score.amax(dim=1), out=self._episode_max)

    def _record_recent(self, finished: Tensor, done: Tensor, count: Tensor) -> None:
        # The newest `history` finished episodes of the block come first in the reversed block
        # (a fixed-size nonzero, so no host sync); the i-th newest is episode number
        # written + count - 1 - i. Unused slots write into the scratch column.
        newest = torch.nonzero_static(done.flip(0), size=self.history, fill_value=-1).squeeze(1)
        used = newest >= 0
        positions = (done.numel() - 1 - newest).clamp_(max=done.numel() - 1)
        episode_numbers = (self._recent_written + count - 1) - self._newest_first
        slots = torch.where(used, episode_numbers.remainder_(self.history), self._scratch_slot)
        self._recent[:, slots] = finished[:, positions]
        self._recent_written.add_(count)

    def drain(self) -> EpisodeSummary:
        """Summarise the episodes finished since the last drain (one host sync) and restart."""
        self.flush()
        totals = torch.cat(
            (
                self._episode_count.double().reshape(1),
                self._episode_sums,
                self._episode_max.double(),
                self._recent_written.double().reshape(1),
                self._recent[:, : self.history].double().flatten(),
            )
        )
        host = totals.cpu().numpy()  # the one host sync
        count = int(round(host[0]))
        sum_return, sum_length, sum_score = host[1:4].tolist()
        max_return, max_score = host[4:6].tolist()
        written = int(round(host[6]))
        recent = host[7:].reshape(3, self.history)[:, : min(written, self.history)]
        self._episode_count.zero_()
        self._episode_sums.zero_()
        self._episode_max.fill_(-math.inf)
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


class StepLog:
    """The (return, length, score) of the episodes that finished in each of the last few steps.

    One (3, N) row per step, holding a finished episode's values in its env's column and zeros
    elsewhere, so that `EpisodeStats` reduces many steps at once. It is deliberately not a
    tensor attribute of `EpisodeStats`: checkpoints copy those, and `flush()` empties this.
    """

    MAX_STEPS = 32
    MAX_ELEMENTS = 1 << 22  # 16 MB of float32: with very many envs, fewer steps per flush

    def __init__(self, num_envs: int, device: torch.device):
        self.capacity = max(1, min(self.MAX_STEPS, self.MAX_ELEMENTS // (3 * num_envs)))
        self._values = torch.zeros(3, self.capacity, num_envs, device=device)
        self._rows = self._values.unbind(1)
        self._steps = 0

    def next_row(self) -> Tensor:
        """The (3, N) row to write this step's values into."""
        row = self._rows[self._steps]
        self._steps += 1
        return row

    def is_full(self) -> bool:
        return self._steps == self.capacity

    def last_row(self) -> Tensor | None:
        """The row written last, None right after a `take` (which makes the log scratch)."""
        return self._rows[self._steps - 1] if self._steps else None

    def take(self) -> Tensor | None:
        """(3, steps, N) values logged since the last take (None if none): a view of the log,
        which starts again from its first row, so the caller may use it as scratch until the
        next `next_row`."""
        if self._steps == 0:
            return None
        values = self._values[:, : self._steps]
        self._steps = 0
        return values


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
        self._field_mask = torch.tensor((1 << self.FIELD_BITS) - 1, device=device)
        self._affine: dict[tuple[float, float], tuple[Tensor, Tensor]] = {}

    def draw(self, num_fields: int, low: float = 0.0, high: float = 1.0, per_env: bool = False) -> Tensor:
        """(num_fields, N) float32 values uniform in [low, high); (N, num_fields) if per_env."""
        self._bits.random_(generator=self.generator)
        fields = (self._bits >> self._shifts[:num_fields]).bitwise_and_(self._field_mask)
        scale, offset = self._scale_and_offset(low, high)
        if per_env:  # written transposed, so that each env's fields lie together
            values = torch.empty(self._bits.shape[0], num_fields, device=self._bits.device)
            torch.mul(fields, scale, out=values.t())
        else:
            values = torch.mul(fields, scale)
        return values.add_(offset)

    def _scale_and_offset(self, low: float, high: float) -> tuple[Tensor, Tensor]:
        # float32 tensors, made once per range: a Python number operand costs as much as the op
        # with few envs, and gives the same float32 arithmetic.
        if (low, high) not in self._affine:
            self._affine[(low, high)] = (
                torch.tensor((high - low) / (1 << self.FIELD_BITS), dtype=torch.float32, device=self._bits.device),
                torch.tensor(low, dtype=torch.float32, device=self._bits.device),
            )
        return self._affine[(low, high)]


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
    metadata: dict = {"render_fps": 30}
    # False keeps a finished env on its last state until reset() (the single-env Gymnasium
    # wrapper and the play command use it to show the crash); training always auto-resets.
    auto_reset: bool = True

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
        self.stats.reset()
        return self._reset_all()

    def _reset_all(self) -> Tensor:
        raise NotImplementedError

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
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

    def __enter__(self) -> "VecEnv":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
