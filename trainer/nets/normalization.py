"""Running statistics for observation and reward normalisation.

Statistics are frozen during a rollout and updated once after it, from sums accumulated on the
device during the rollout. That keeps every step cheap, makes the observations the policy saw
exactly the ones the update trains on, and lets distributed ranks merge their moments with one
all-reduce.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

EPSILON = 1e-8
CLIP = 10.0


class RunningMeanStd(nn.Module):
    """Mean and variance of a stream of tensors of one shape (Chan et al.'s parallel update).

    Buffers (`mean`, `var`, `count`) live in the policy's state_dict, so a saved model applies the
    same normalisation it was trained with.
    """

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(EPSILON, dtype=torch.float64))
        # Sums of the batch being accumulated (not saved: they are empty between updates). Made
        # here and only ever updated in place, so that accumulating inside the rollout's
        # torch.inference_mode() never turns them into inference tensors.
        self.register_buffer("_sum", torch.zeros(shape, dtype=torch.float64), persistent=False)
        self.register_buffer("_sum_squares", torch.zeros(shape, dtype=torch.float64), persistent=False)
        self._batch_count = 0
        self._scale: Tensor | None = None
        self._shift: Tensor | None = None

    def normalize(self, x: Tensor) -> Tensor:
        if self._scale is None:
            self.refresh()
        return ((x - self._shift) * self._scale).clamp_(-CLIP, CLIP)

    def refresh(self) -> None:
        """Recompute the float32 shift / scale from the statistics (after loading or updating)."""
        self._shift = self.mean.float()
        self._scale = (self.var + EPSILON).rsqrt().float()

    def accumulate(self, x: Tensor) -> None:
        """Add a batch (N, *shape) to the pending sums (device ops only)."""
        x = x.double()
        self._sum.add_(x.sum(0))
        self._sum_squares.add_(x.square().sum(0))
        self._batch_count += x.shape[0]

    def pending(self) -> tuple[Tensor, Tensor, int] | None:
        if self._batch_count == 0:
            return None
        return self._sum, self._sum_squares, self._batch_count

    def commit(self, reduce=None) -> None:
        """Fold the pending sums into the statistics. `reduce(tensor)` sums a tensor over
        distributed ranks in place (None on one process)."""
        pending = self.pending()
        if pending is None:
            return
        total, total_squares, count = pending
        packed = torch.cat(
            (
                total.reshape(-1),
                total_squares.reshape(-1),
                torch.tensor([float(count)], dtype=torch.float64, device=total.device),
            )
        )
        if reduce is not None:
            reduce(packed)
        size = total.numel()
        batch_count = packed[-1]
        batch_mean = (packed[:size] / batch_count).reshape(self.mean.shape)
        batch_var = (packed[size : 2 * size] / batch_count).reshape(self.mean.shape) - batch_mean.square()
        batch_var.clamp_(min=0.0)
        delta = batch_mean - self.mean
        new_count = self.count + batch_count
        self.mean.add_(delta * batch_count / new_count)
        m2 = self.var * self.count + batch_var * batch_count + delta.square() * self.count * batch_count / new_count
        self.var.copy_(m2 / new_count)
        self.count.copy_(new_count)
        self._sum.zero_()
        self._sum_squares.zero_()
        self._batch_count = 0
        self.refresh()

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._scale = None  # recomputed from the loaded statistics on next use


class RewardScaler:
    """Divides rewards by the running standard deviation of the discounted return
    (as Stable-Baselines3's VecNormalize and the PPO implementation details do)."""

    def __init__(self, num_envs: int, gamma: float, device: torch.device):
        self.gamma = gamma
        self.discounted_return = torch.zeros(num_envs, device=device)
        self.return_stats = RunningMeanStd(())
        self.return_stats.to(device)

    def scale(self, reward: Tensor, done: Tensor) -> Tensor:
        self.discounted_return.mul_(self.gamma).add_(reward)
        self.return_stats.accumulate(self.discounted_return)
        self.discounted_return.masked_fill_(done, 0.0)
        if self.return_stats._scale is None:
            self.return_stats.refresh()
        return (reward * self.return_stats._scale).clamp_(-CLIP, CLIP)

    def state_dict(self) -> dict:
        return {
            "discounted_return": self.discounted_return.clone(),
            **{key: value.clone() for key, value in self.return_stats.state_dict().items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.discounted_return.copy_(state["discounted_return"])
        self.return_stats.load_state_dict({key: state[key] for key in ("mean", "var", "count")})
        self.return_stats.refresh()
