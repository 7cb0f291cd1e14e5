"""The episode statistics every env reports, kept on the device.

`EpisodeStats` keeps the running return / length / score of every env and the totals of the
episodes that finished, all on the device, so that stepping never waits for the host. The
trainer calls `drain()` once per update: one host sync, one `EpisodeSummary`.

An actor that ships its finished episodes elsewhere calls `keep_finished()` once, then
`take_finished()` for the (E, 3) episodes since the last take; the learner that receives them
folds them into its own statistics with `add_finished()`, so its summaries count them as if its
env had played them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

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
        # Copies of the step log's blocks since the last `take_finished` (None: nobody takes them;
        # a list, not a tensor attribute, so that checkpoints skip it).
        self._kept: list[Tensor] | None = None

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
        if self._kept is not None:
            self._kept.append(finished.clone())  # before the fold below uses the log as scratch
        self._fold(finished)

    def _fold(self, finished: Tensor) -> None:
        """Fold a (3, steps, N) block of finished episodes (length 0: none) into the totals, the
        maxima and the recent window; the block is scratch afterwards."""
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

    def keep_finished(self) -> None:
        """From now on keep the episodes that finish for `take_finished` (a copy of the step log
        per fold; nothing is kept until this is called). Calling it again changes nothing."""
        if self._kept is None:
            self.flush()  # the steps logged so far finished before keeping began
            self._kept = []

    def take_finished(self) -> Tensor:
        """(E, 3) float32 return, length and score of the episodes finished since the last take
        (or since `keep_finished`), in the order they ended (step by step, env by env); one host
        sync. They still count in `drain`'s summaries."""
        if self._kept is None:
            raise RuntimeError("EpisodeStats.take_finished() needs keep_finished() first")
        self.flush()
        if not self._kept:
            return torch.zeros(0, 3, device=self.device)
        blocks, self._kept = self._kept, []
        finished = torch.cat(blocks, dim=1).flatten(1)  # (3, steps * N): step by step, env by env
        return finished[:, finished[1] > 0].t().contiguous()

    def add_finished(self, episodes: Tensor) -> None:
        """Count (E, 3) return, length, score of episodes played elsewhere (an actor's, from
        `take_finished`) as finished here, after the ones this env has logged so far; the
        episodes in progress and `finished` stay this env's own."""
        if episodes.ndim != 2 or episodes.shape[1] != 3:
            raise ValueError(
                f"add_finished takes an (E, 3) tensor of return, length, score; got {tuple(episodes.shape)}"
            )
        if episodes.shape[0] == 0:
            return
        self.flush()
        block = episodes.to(device=self.device, dtype=torch.float32).t().unsqueeze(1).clone()  # (3, 1, E)
        block[1].clamp_(min=1.0)  # an episode lasts a step at least: length 0 would read as no episode
        self._fold(block)

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
