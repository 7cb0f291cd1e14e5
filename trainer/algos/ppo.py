"""PPO (Schulman et al. 2017) and A2C as its one-epoch, unclipped special case.

Read top to bottom, this is the algorithm:

1. `compute_gae`: advantages by Generalised Advantage Estimation (Schulman et al. 2016),
   returns = advantages + values.
2. `ppo_loss`: the loss of one minibatch, as the paper writes it (its eq. 9, to minimise):
       ratio      = pi(a|s) / pi_old(a|s)
       policy     = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)      (a2c: -ratio * A)
       value      = 0.5 * (V(s) - R)^2                      (optionally clipped around V_old)
       loss       = policy - ent_coef * entropy + vf_coef * value
   It is the reference: for the MLP policies the update takes the same gradient written out
   (trainer/algos/ppo_fast.py: a minibatch step about 1.6x faster on a CPU), and tests/test_trainer_ppo.py holds
   that gradient to autograd's gradient of this loss.
   `ppo_update`: for `update_epochs` passes over the batch, in minibatches, with
   per-minibatch advantage normalisation, global gradient-norm clipping and an optional
   early stop once the approximate KL divergence of an epoch passes `target_kl`.
   With `use_per`, minibatches are drawn in proportion to |A|^alpha and the value loss is
   weighted by importance weights (N P(i))^-beta / max (prioritised replay, Schaul et al. 2016,
   applied to one rollout).
3. `Adam`: the optimiser, written out here over one flat parameter vector. Two reasons: one
   tensor makes each step a handful of kernel launches instead of a handful per layer (small
   networks are launch-bound on CPU), and constructing `torch.optim.Adam` imports
   `torch._dynamo`, which adds about a second to every launch.

Everything stays on the device; the only host syncs are one `.tolist()` of the statistics at
the end of an update (plus one per epoch when `target_kl` is set).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

from trainer.algos import ppo_fast as mlp_grad
if TYPE_CHECKING:
    from trainer.config.keys import TrainConfig


# ---------------------------------------------------------------------------------------------
# 1. Advantages


def compute_gae(rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor,
                gamma: float, gae_lambda: float) -> tuple[Tensor, Tensor]:
    """GAE over a rollout of shape (T, N).

    dones[t] is 1 where the episode ended with step t (rewards of truncated episodes already
    include gamma * V(final observation)), so V(s_{t+1}) is not bootstrapped across it.
    """
    not_done = 1.0 - dones
    next_values = torch.cat((values[1:], last_value.unsqueeze(0)))
    deltas = rewards + gamma * next_values * not_done - values            # TD errors
    decay = (gamma * gae_lambda) * not_done
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(last_value)
    for delta, step_decay, advantage in zip(deltas.unbind(0)[::-1], decay.unbind(0)[::-1],
                                            advantages.unbind(0)[::-1]):
        running = torch.addcmul(delta, step_decay, running, out=advantage)  # A_t = delta_t + g*l*A_{t+1}
    return advantages, advantages + values


# ---------------------------------------------------------------------------------------------
# 2. The update


@dataclass
class UpdateBatch:
    """One rollout flattened to (batch_size, ...)."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    advantages: Tensor
    returns: Tensor
    values: Tensor

    def take(self, rows: Tensor) -> "UpdateBatch":
        """The samples at `rows` (a copy)."""
        return UpdateBatch(*(tensor[rows] for tensor in self._fields()))

    def slice(self, start: int, stop: int) -> "UpdateBatch":
        """Samples start..stop-1 (views, no copy)."""
        return UpdateBatch(*(tensor[start:stop] for tensor in self._fields()))

    def _fields(self) -> tuple[Tensor, ...]:
        return self.obs, self.actions, self.log_probs, self.advantages, self.returns, self.values


@dataclass(frozen=True)
class UpdateSettings:
    """What the update reads from the config: each field is the TrainConfig key of the same
    name (see trainer/config/keys.py for what it means), plus `unclipped`."""

    update_epochs: int
    mini_batch_size: int
    clip_coef: float
    clip_vloss: bool
    norm_adv: bool
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: float | None
    unclipped: bool            # a2c: the plain policy gradient, no clipping
    use_per: bool
    per_alpha: float
    per_beta: float

    @classmethod
    def from_config(cls, config: "TrainConfig") -> "UpdateSettings":
        """The settings of a validated config, taken by name (a key renamed in the config fails
        here, loudly, instead of being listed twice)."""
        values = {field.name: getattr(config, field.name) for field in fields(cls) if field.name != "unclipped"}
        return cls(**values, unclipped=config.algo == "a2c")


UPDATE_STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def ppo_update(policy: nn.Module, optimizer: "Adam", batch: UpdateBatch, settings: UpdateSettings,
               learning_rate: float, generator: torch.Generator,
               reduce_gradients: Callable[[Tensor], None] | None = None) -> dict[str, float]:
    """Optimise the policy on one rollout; returns the mean loss statistics and
    explained variance."""
    batch_size = batch.obs.shape[0]
    size = settings.mini_batch_size
    num_minibatches = batch_size // size
    device = batch.obs.device
    loss_totals = torch.zeros(3, device=device)         # policy loss, value loss, entropy
    ratio_totals = torch.zeros(2, device=device)        # approx KL, clip fraction (per epoch)
    steps_taken = epochs_taken = 0
    sampler = _PrioritySampler(batch.advantages, settings, generator) if settings.use_per else None
    normalize_advantages = settings.norm_adv and size > 1
    for _ in range(settings.update_epochs):
        log_ratios = []
        if sampler is None:
            # Shuffle once per epoch; minibatches are then contiguous views, and their advantages
            # are normalised all at once (row by row: the same as one minibatch at a time).
            shuffled = batch.take(torch.randperm(batch_size, generator=generator, device=device)[:num_minibatches * size])
            advantages = shuffled.advantages.view(num_minibatches, size)
            if normalize_advantages:
                advantages = _normalize_rows(advantages)
        for index in range(num_minibatches):
            if sampler is None:
                minibatch = shuffled.slice(index * size, (index + 1) * size)
                minibatch_advantages, value_weights = advantages[index], None
            else:
                rows, value_weights = sampler.sample()
                minibatch = batch.take(rows)
                minibatch_advantages = minibatch.advantages
                if normalize_advantages:
                    minibatch_advantages = _normalize_rows(minibatch_advantages)
            losses, log_ratio = _minibatch_step(policy, optimizer, minibatch, minibatch_advantages, value_weights,
                                                settings, learning_rate, reduce_gradients)
            loss_totals += losses
            log_ratios.append(log_ratio)
            steps_taken += 1
        epoch_ratio_stats = _ratio_statistics(torch.cat(log_ratios), settings.clip_coef)
        ratio_totals += epoch_ratio_stats
        epochs_taken += 1
        if settings.target_kl is not None and epoch_ratio_stats[0].item() > settings.target_kl:
            break
    # One host sync for all statistics.
    return_variance = batch.returns.var()
    residual_variance = (batch.returns - batch.values).var()
    host = torch.cat((loss_totals / steps_taken, ratio_totals / epochs_taken,
                      torch.stack((return_variance, residual_variance)))).tolist()
    result: dict[str, float | None] = dict(zip(UPDATE_STAT_NAMES, host[:-2]))
    result["explained_variance"] = explained_variance(host[-2], host[-1])
    result["gradient_steps"] = steps_taken
    return result


def _normalize_rows(advantages: Tensor) -> Tensor:
    """Zero mean and unit standard deviation along the last dimension (each minibatch)."""
    mean = advantages.mean(-1, keepdim=True)
    return (advantages - mean) / (advantages.std(-1, keepdim=True) + 1e-8)


def _minibatch_step(policy: nn.Module, optimizer: "Adam", batch: UpdateBatch, advantages: Tensor,
                    value_weights: Tensor | None, settings: UpdateSettings, learning_rate: float,
                    reduce_gradients: Callable[[Tensor], None] | None) -> tuple[Tensor, Tensor]:
    """One gradient step; returns (policy loss, value loss, entropy) and log(pi / pi_old) of
    every sample, detached."""
    optimizer.check_parameters()
    if optimizer.written_out is not None and not settings.clip_vloss:
        # The gradient of ppo_loss, written out (faster; see trainer/algos/ppo_fast.py).
        losses, log_ratio = mlp_grad.ppo_loss_and_gradient(optimizer.written_out, batch, advantages,
                                                           value_weights, settings)
    else:
        optimizer.zero_grad()
        loss, losses, log_ratio = ppo_loss(policy, batch, advantages, value_weights, settings)
        loss.backward()
    if reduce_gradients is not None:
        reduce_gradients(optimizer.flat_grad)
    optimizer.clip_grad_norm(settings.max_grad_norm)
    optimizer.step(learning_rate)
    return losses, log_ratio


def ppo_loss(policy: nn.Module, batch: UpdateBatch, advantages: Tensor, value_weights: Tensor | None,
             settings: UpdateSettings) -> tuple[Tensor, Tensor, Tensor]:
    """The PPO loss of one minibatch (Schulman et al. 2017, eq. 9, negated to minimise), the
    reference every faster path is tested against.

    Returns (loss, detached (policy loss, value loss, entropy), detached log(pi / pi_old) per
    sample). `advantages` are the minibatch's (normalised) advantages; `value_weights` the
    prioritised-replay importance weights, or None.
    """
    new_log_prob, entropy, new_value = policy.evaluate(batch.obs, batch.actions)
    log_ratio = new_log_prob - batch.log_probs
    ratio = log_ratio.exp()                                          # r = pi(a|s) / pi_old(a|s)

    # Policy loss: the clipped surrogate objective, -min(r A, clip(r, 1 - eps, 1 + eps) A).
    # (a2c: -r A, whose gradient at r = 1 is the plain policy gradient -A grad log pi.)
    surrogate = ratio * advantages
    if settings.unclipped:
        policy_loss = -surrogate.mean()
    else:
        clipped_surrogate = ratio.clamp(1.0 - settings.clip_coef, 1.0 + settings.clip_coef) * advantages
        policy_loss = -torch.min(surrogate, clipped_surrogate).mean()

    # Value loss: 0.5 (V(s) - R)^2 to the GAE returns R, optionally clipped around the old values.
    value_error = (new_value - batch.returns).square()
    if settings.clip_vloss:
        clipped_value = batch.values + (new_value - batch.values).clamp(-settings.clip_coef, settings.clip_coef)
        value_error = torch.max(value_error, (clipped_value - batch.returns).square())
    if value_weights is not None:
        value_error = value_error * value_weights
    value_loss = 0.5 * value_error.mean()

    # Entropy bonus: subtracted, so minimising the loss keeps the policy exploring.
    entropy_bonus = entropy.mean()
    loss = policy_loss - settings.ent_coef * entropy_bonus + settings.vf_coef * value_loss
    with torch.no_grad():
        return loss, torch.stack((policy_loss, value_loss, entropy_bonus)), log_ratio.detach()


@torch.no_grad()
def _ratio_statistics(log_ratio: Tensor, clip_coef: float) -> Tensor:
    """(approx KL, clip fraction) over samples: how far the update moved the policy."""
    ratio_minus_one = log_ratio.exp() - 1.0
    approx_kl = (ratio_minus_one - log_ratio).mean()          # the k3 estimator of KL(old || new)
    clip_fraction = (ratio_minus_one.abs() > clip_coef).float().mean()
    return torch.stack((approx_kl, clip_fraction))


class _PrioritySampler:
    """Minibatch rows drawn with probability proportional to |advantage|^alpha."""

    def __init__(self, advantages: Tensor, settings: UpdateSettings, generator: torch.Generator):
        priorities = advantages.abs().pow(settings.per_alpha) + 1e-6
        self.probabilities = priorities / priorities.sum()
        weights = (advantages.numel() * self.probabilities).pow(-settings.per_beta)
        self.weights = weights / weights.max()
        self.size = settings.mini_batch_size
        self.generator = generator

    def sample(self) -> tuple[Tensor, Tensor]:
        rows = torch.multinomial(self.probabilities, self.size, replacement=True, generator=self.generator)
        return rows, self.weights[rows]


def explained_variance(return_variance: float, residual_variance: float) -> float | None:
    """1 - Var(returns - values) / Var(returns): 1 is a perfect critic, 0 no better than a constant."""
    if not return_variance or math.isnan(return_variance):
        return None
    return 1.0 - residual_variance / return_variance


# ---------------------------------------------------------------------------------------------
# 3. The optimiser


class OptimizerError(RuntimeError):
    """The module's parameters are no longer the ones the optimiser steps."""


class Adam:
    """Adam (Kingma & Ba 2015) over all parameters of a module at once.

    The parameters are re-pointed into one contiguous vector (and their gradients into another),
    so zeroing, clipping, all-reducing and stepping are each one operation on one tensor.
    `state_dict()` holds plain tensors and numbers (checkpoints load with weights_only=True).

    Built once per module, after the module is on its device; it also decides, once, how the
    update computes the gradient (`written_out`: the MLP structure for trainer/algos/ppo_fast.py, or
    None for autograd), since that depends only on the network's structure.
    """

    def __init__(self, module: nn.Module, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-5):
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self.parameters = [p for _, p in named]
        self.flat_param, self.flat_grad = _flatten_into_views(self.parameters)
        # Where each parameter and its gradient must stay (see check_parameters).
        self._names = [name for name, _ in named]
        self._data_ptrs = [p.data_ptr() for p in self.parameters]
        self._grads = [p.grad for p in self.parameters]
        self.written_out = mlp_grad.structure_of(module)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.step_count = 0
        self.exp_avg = torch.zeros_like(self.flat_param)
        self.exp_avg_sq = torch.zeros_like(self.flat_param)

    def check_parameters(self) -> None:
        """Raise OptimizerError unless every parameter and its `.grad` are still views of the
        flat vectors (host-side pointer comparisons, no device work). Otherwise the step
        would update a vector the module no longer reads, or read gradients nobody writes."""
        # The common case in two C-level passes (about 4 us for ppo-small), the message after.
        if (list(map(Tensor.data_ptr, self.parameters)) == self._data_ptrs
                and all(map(operator.is_, map(_grad_of, self.parameters), self._grads))):
            return
        for name, parameter, data_ptr, grad in zip(self._names, self.parameters, self._data_ptrs, self._grads):
            if parameter.data_ptr() != data_ptr:
                raise OptimizerError(
                    f"parameter {name!r} was moved or replaced after the optimiser was built (by .to(), "
                    f".double(), assigning .data, ...), so a step would not change the model: move the "
                    f"model first, then build Adam(model)")
            if parameter.grad is not grad:
                found = "None" if parameter.grad is None else "a tensor of its own"
                raise OptimizerError(
                    f"parameter {name!r} has .grad = {found}, not the optimiser's gradient vector "
                    f"(module.zero_grad() sets .grad to None): call optimizer.zero_grad() instead")

    def zero_grad(self) -> None:
        self.flat_grad.zero_()

    def clip_grad_norm(self, max_norm: float) -> Tensor:
        """Scale the gradient so that its global L2 norm is at most max_norm (no host sync)."""
        norm = self.flat_grad.norm()
        self.flat_grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm

    @torch.no_grad()
    def step(self, learning_rate: float) -> None:
        self.step_count += 1
        grad = self.flat_grad
        self.exp_avg.lerp_(grad, 1.0 - self.beta1)                      # m = b1 m + (1 - b1) g
        self.exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1.0 - self.beta2)
        bias_correction1 = 1.0 - self.beta1 ** self.step_count
        root_bias_correction2 = math.sqrt(1.0 - self.beta2 ** self.step_count)
        # p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), with the scalars gathered so that the
        # vector work is one sqrt, one add and one addcdiv.
        denominator = self.exp_avg_sq.sqrt().add_(self.eps * root_bias_correction2)
        self.flat_param.addcdiv_(self.exp_avg, denominator,
                                 value=-learning_rate * root_bias_correction2 / bias_correction1)

    def state_dict(self) -> dict:
        return {"step": self.step_count, "exp_avg": self.exp_avg.clone(), "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        if state["exp_avg"].shape != self.exp_avg.shape:
            raise ValueError(f"optimizer state has {state['exp_avg'].numel()} values, the model "
                             f"{self.exp_avg.numel()}: the checkpoint belongs to a different model")
        self.step_count = int(state["step"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])


def _grad_of(parameter: Tensor) -> Tensor | None:
    return parameter.grad


def _flatten_into_views(parameters: list[nn.Parameter]) -> tuple[Tensor, Tensor]:
    """Move every parameter (and its gradient) into views of two flat tensors."""
    device = parameters[0].device
    total = sum(p.numel() for p in parameters)
    flat_param = torch.empty(total, device=device)
    flat_grad = torch.zeros(total, device=device)
    offset = 0
    for parameter in parameters:
        size = parameter.numel()
        flat_param[offset:offset + size].copy_(parameter.data.reshape(-1))
        parameter.data = flat_param[offset:offset + size].view_as(parameter)
        # backward() accumulates into an existing .grad in place, so gradients land in flat_grad.
        parameter.grad = flat_grad[offset:offset + size].view_as(parameter)
        offset += size
    return flat_param, flat_grad
