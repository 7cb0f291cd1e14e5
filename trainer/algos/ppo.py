"""PPO (Schulman et al. 2017) and A2C as its one-epoch, unclipped special case, read top to bottom:

1. `PPO`, the algorithm the loop runs (trainer/algos/base.py), per update:
   `collect`: a rollout of `num_steps` from every env (trainer/algos/rollout.py), scored with
   pi_old(a|s) and V_old(s), then advantages and returns by GAE;
   `update`: `ppo_update` on it. `A2C` is the same with one unclipped pass.
2. `compute_gae`: advantages by Generalised Advantage Estimation (Schulman et al. 2016),
   returns = advantages + values.
3. `ppo_update`: for `update_epochs` passes over the batch, in minibatches, with per-minibatch
   advantage normalisation, global gradient-norm clipping and an optional early stop once the
   approximate KL divergence of an epoch passes `target_kl`. With `use_per`, minibatches are
   drawn in proportion to |A|^alpha and the value loss is weighted by importance weights
   (N P(i))^-beta / max (prioritised replay, Schaul et al. 2016, applied to one rollout).
   `ppo_loss` (trainer/algos/ppo_gradient.py): the loss of one minibatch, as the paper writes it (eq. 9, minimised):
       ratio      = pi(a|s) / pi_old(a|s)
       policy     = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)      (a2c: -ratio * A)
       value      = 0.5 * (V(s) - R)^2                      (optionally clipped around V_old)
       loss       = policy - ent_coef * entropy + vf_coef * value
   With action masks (trainer/algos/rollout.py), pi and its entropy are those of the masked
   distribution the rollout sampled from.
4. `choose_gradient`: how its gradient is computed, decided once per network: autograd on
   `ppo_loss`, or for the MLP policies the same gradient written out (trainer/algos/ppo_fast.py:
   a minibatch step about 1.6x faster on a CPU; tests/test_trainer_ppo.py holds it to autograd).

The keys it reads are declared in trainer/algos/ppo_settings.py; the optimiser is
trainer/algos/adam.py. Everything stays on the device; the only host syncs are one `.tolist()`
of the statistics at the end of an update (plus one per epoch when `target_kl` is set).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from trainer.algos.adam import Adam, OptimizerError  # noqa: F401 (OptimizerError: re-exported)
from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.ppo_gradient import Gradient, choose_gradient, ratio_statistics
from trainer.algos.ppo_settings import (
    A2C_SUMMARY,
    PPO_MEAN_METRICS,
    PPO_METRICS,
    PPO_SUMMARY,
    PPOKeys,
    UpdateBatch,
    UpdateSettings,
    check_a2c,
)
from trainer.algos.rollout import RolloutBuffer, collect_rollout, score_rollout
from trainer.nets.build import build_policy
from trainer.nets.normalization import RewardScaler
from trainer.nets.spec import is_recurrent

UPDATE_STAT_NAMES = PPO_MEAN_METRICS  # declared in ppo_settings.py, in the order stacked below
RECURRENT_FORM = "trainer.algos.recurrent_ppo:recurrent_form"  # PPO / A2C with a recurrent policy


# ---------------------------------------------------------------------------------------------
# 1. The algorithm


class PPO(Algorithm):
    """Proximal Policy Optimisation: collect a rollout, then `update_epochs` passes over it."""

    summary = PPO_SUMMARY
    keys = PPOKeys
    metric_names = PPO_METRICS
    unclipped = False
    recurrent = False

    def __new__(cls, setup: Setup):
        """A recurrent network (`model_type: ppo-lstm`) learns from whole sequences: PPO and A2C
        then build their recurrent form (trainer/algos/recurrent_ppo.py), the same loss."""
        if not cls.recurrent and is_recurrent(setup.policy_spec):
            module, _, name = RECURRENT_FORM.partition(":")  # by path, as the registry's: it imports this module
            cls = getattr(importlib.import_module(module), name)(cls)
        return super().__new__(cls)

    def __init__(self, setup: Setup):
        super().__init__(setup)
        config, device = setup.config, setup.device
        self.policy = build_policy(setup.policy_spec).to(device)
        if setup.broadcast is not None:
            setup.broadcast(self.policy)  # every rank starts from rank 0's weights
        self.optimizer = Adam(self.policy)
        self.settings = UpdateSettings.from_config(config, unclipped=self.unclipped)
        self.gradient = choose_gradient(self.policy, self.settings)
        self.reward_scaler = RewardScaler(config.num_envs, config.gamma, device) if config.norm_reward else None
        self.buffer = RolloutBuffer.allocate(
            config.num_steps, config.num_envs, tuple(setup.policy_spec["obs_shape"]), self.policy, device
        )
        self.steps_per_update = config.batch_size
        self.batch: UpdateBatch | None = None

    def start(self, obs: Tensor) -> None:
        if self.policy.obs_normalizer is not None:  # start from the statistics of the first observations
            self.policy.obs_normalizer.accumulate(obs)
            self.policy.obs_normalizer.commit(self.setup.reduce_sum)

    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        """num_steps from every env, scored with the current network, then GAE."""
        setup, policy, buffer = self.setup, self.policy, self.buffer
        obs = collect_rollout(setup.env, policy, buffer, obs, setup.generator, self.reward_scaler)
        score_rollout(policy, buffer, setup.config.gamma)
        with torch.no_grad():
            last_value = policy.value(policy.normalize_obs(obs))
        advantages, returns = compute_gae(
            buffer.rewards, buffer.values, buffer.dones, last_value, setup.config.gamma, self.settings.gae_lambda
        )
        self.commit_statistics()
        self.batch = buffer.flatten(advantages, returns)
        return obs

    def commit_statistics(self) -> None:
        """After a rollout: norm_obs's and norm_reward's statistics take in what it saw (all ranks)."""
        if self.policy.obs_normalizer is not None:
            self.policy.obs_normalizer.commit(self.setup.reduce_sum)
        if self.reward_scaler is not None:
            self.reward_scaler.return_stats.commit(self.setup.reduce_sum)

    def update(self, progress: Progress) -> dict:
        return ppo_update(
            self.policy,
            self.optimizer,
            self.batch,
            self.settings,
            progress.learning_rate,
            self.setup.generator,
            self.setup.reduce_mean,
            self.gradient,
        )

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler is not None else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.reward_scaler is not None and state.get("reward_scaler") is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])


class A2C(PPO):
    """Advantage Actor-Critic: PPO's update with one unclipped pass over each rollout."""

    summary = A2C_SUMMARY
    unclipped = True
    check_config = staticmethod(check_a2c)


# ---------------------------------------------------------------------------------------------
# 2. Advantages


def compute_gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float, gae_lambda: float
) -> tuple[Tensor, Tensor]:
    """GAE over a rollout of shape (T, N).

    dones[t] is 1 where the episode ended with step t (rewards of truncated episodes already
    include gamma * V(final observation)), so V(s_{t+1}) is not bootstrapped across it.
    """
    not_done = 1.0 - dones
    next_values = torch.cat((values[1:], last_value.unsqueeze(0)))
    deltas = rewards + gamma * next_values * not_done - values  # TD errors
    decay = (gamma * gae_lambda) * not_done
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(last_value)
    for delta, step_decay, advantage in zip(deltas.unbind(0)[::-1], decay.unbind(0)[::-1], advantages.unbind(0)[::-1]):
        running = torch.addcmul(delta, step_decay, running, out=advantage)  # A_t = delta_t + g*l*A_{t+1}
    return advantages, advantages + values


# ---------------------------------------------------------------------------------------------
# 3. The update


def ppo_update(
    policy: nn.Module,
    optimizer: Adam,
    batch: UpdateBatch,
    settings: UpdateSettings,
    learning_rate: float,
    generator: torch.Generator,
    reduce_gradients: Callable[[Tensor], None] | None = None,
    gradient: Gradient | None = None,
) -> dict[str, float]:
    """Optimise the policy on one rollout; returns the mean loss statistics and
    explained variance. gradient: `choose_gradient(policy, settings)` (chosen here if not given)."""
    gradient = gradient or choose_gradient(policy, settings)
    batch_size = batch.obs.shape[0]
    size = settings.mini_batch_size
    num_minibatches = batch_size // size
    device = batch.obs.device
    loss_totals = torch.zeros(3, device=device)  # policy loss, value loss, entropy
    ratio_totals = torch.zeros(2, device=device)  # approx KL, clip fraction (per epoch)
    steps_taken = epochs_taken = 0
    sampler = _PrioritySampler(batch.advantages, settings, generator) if settings.use_per else None
    normalize_advantages = settings.norm_adv and size > 1
    for _ in range(settings.update_epochs):
        log_ratios = []
        if sampler is None:
            # Shuffle once per epoch; minibatches are then contiguous views, and their advantages
            # are normalised all at once (row by row: the same as one minibatch at a time).
            shuffled = batch.take(
                torch.randperm(batch_size, generator=generator, device=device)[: num_minibatches * size]
            )
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
            losses, log_ratio = _minibatch_step(
                gradient,
                optimizer,
                minibatch,
                minibatch_advantages,
                value_weights,
                settings,
                learning_rate,
                reduce_gradients,
            )
            loss_totals += losses
            log_ratios.append(log_ratio)
            steps_taken += 1
        epochs_taken += 1
        if end_of_epoch(log_ratios, ratio_totals, settings):
            break
    return update_statistics(loss_totals / steps_taken, ratio_totals / epochs_taken, batch, steps_taken)


def end_of_epoch(log_ratios: list[Tensor], ratio_totals: Tensor, settings: UpdateSettings) -> bool:
    """Add the epoch's (approx KL, clip fraction) to `ratio_totals`; True when it moved the policy
    past `target_kl` (the update stops early)."""
    epoch_ratio_stats = ratio_statistics(torch.cat(log_ratios), settings.clip_coef)
    ratio_totals += epoch_ratio_stats
    return settings.target_kl is not None and epoch_ratio_stats[0].item() > settings.target_kl


def update_statistics(losses: Tensor, ratios: Tensor, batch: UpdateBatch, steps_taken: int) -> dict[str, float]:
    """An update's metrics from its mean losses and ratio statistics, the explained variance of
    the rollout's `returns` by its `values`, and its gradient steps: one host sync for all."""
    return_variance = batch.returns.var()
    residual_variance = (batch.returns - batch.values).var()
    host = torch.cat((losses, ratios, torch.stack((return_variance, residual_variance)))).tolist()
    result: dict[str, float | None] = dict(zip(UPDATE_STAT_NAMES, host[:-2]))
    result["explained_variance"] = explained_variance(host[-2], host[-1])
    result["gradient_steps"] = steps_taken
    return result


def _normalize_rows(advantages: Tensor) -> Tensor:
    """Zero mean and unit standard deviation along the last dimension (each minibatch)."""
    mean = advantages.mean(-1, keepdim=True)
    return (advantages - mean) / (advantages.std(-1, keepdim=True) + 1e-8)


def _minibatch_step(
    gradient: Gradient,
    optimizer: Adam,
    batch: UpdateBatch,
    advantages: Tensor,
    value_weights: Tensor | None,
    settings: UpdateSettings,
    learning_rate: float,
    reduce_gradients: Callable[[Tensor], None] | None,
) -> tuple[Tensor, Tensor]:
    """One gradient step; returns (policy loss, value loss, entropy) and log(pi / pi_old) of
    every sample, detached."""
    optimizer.check_parameters()
    losses, log_ratio = gradient(optimizer, batch, advantages, value_weights, settings)
    if reduce_gradients is not None:
        reduce_gradients(optimizer.flat_grad)
    optimizer.clip_grad_norm(settings.max_grad_norm)
    optimizer.step(learning_rate)
    return losses, log_ratio


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
