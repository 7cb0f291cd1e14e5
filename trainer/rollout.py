"""Rollout storage and collection: `num_steps` steps from every env, all tensors on the device.

The hot loop does tensor ops only (no `.item()`, no boolean indexing), so on a GPU it never
waits for the host, and on a CPU it never pays for a sync. Truncated episodes (time limits) are
bootstrapped once per rollout from the env's `final_obs`: reward += gamma * V(final obs).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.models import ActorCritic
from trainer.normalization import RewardScaler
from trainer.ppo import UpdateBatch


@dataclass
class RolloutBuffer:
    obs: Tensor          # (T, N, *obs_shape) as the policy saw them (normalised if norm_obs)
    actions: Tensor      # (T, N) int64 or (T, N, act_dim) float32, as sampled (unclipped)
    log_probs: Tensor    # (T, N) log pi_old(a|s)
    values: Tensor       # (T, N) V_old(s)
    rewards: Tensor      # (T, N) (scaled if norm_reward)
    dones: Tensor        # (T, N) 1.0 where the episode ended with this step
    truncated: Tensor    # (T, N) bool: ended by a time limit, not by the game
    final_obs: Tensor    # (T, N, *obs_shape) the observation an episode ended on

    @classmethod
    def allocate(cls, num_steps: int, num_envs: int, obs_shape: tuple[int, ...], policy: ActorCritic,
                 device: torch.device) -> "RolloutBuffer":
        def zeros(*shape, dtype=torch.float32):
            return torch.zeros((num_steps, num_envs, *shape), dtype=dtype, device=device)

        action = policy.spec["action"]
        actions = zeros(dtype=torch.int64) if action["kind"] == "discrete" else zeros(action["dim"])
        return cls(obs=zeros(*obs_shape), actions=actions, log_probs=zeros(), values=zeros(), rewards=zeros(),
                   dones=zeros(), truncated=zeros(dtype=torch.bool), final_obs=zeros(*obs_shape))

    def flatten(self, advantages: Tensor, returns: Tensor) -> UpdateBatch:
        def flat(tensor: Tensor) -> Tensor:
            return tensor.reshape(-1, *tensor.shape[2:])

        return UpdateBatch(obs=flat(self.obs), actions=flat(self.actions), log_probs=flat(self.log_probs),
                           advantages=flat(advantages), returns=flat(returns), values=flat(self.values))


@torch.no_grad()
def collect_rollout(env, policy: ActorCritic, buffer: RolloutBuffer, next_obs: Tensor,
                    generator: torch.Generator, reward_scaler: RewardScaler | None) -> Tensor:
    """Fill `buffer` with one rollout starting from the env observations `next_obs`; returns
    the env observations the next rollout starts from. With norm_obs, the statistics stay
    fixed during the rollout and only accumulate the new observations (see normalization.py)."""
    normalizer = policy.obs_normalizer
    for step in range(buffer.obs.shape[0]):
        obs = next_obs if normalizer is None else normalizer.normalize(next_obs)
        buffer.obs[step].copy_(obs)
        action, log_prob, value = policy.act(obs, generator)
        next_obs, reward, terminated, truncated, info = env.step(policy.env_action(action))
        done = terminated | truncated
        if reward_scaler is not None:
            reward = reward_scaler.scale(reward, done)
        buffer.actions[step].copy_(action)
        buffer.log_probs[step].copy_(log_prob)
        buffer.values[step].copy_(value)
        buffer.rewards[step].copy_(reward)
        buffer.dones[step].copy_(done)
        torch.logical_and(truncated, ~terminated, out=buffer.truncated[step])
        final_obs = info["final_obs"]
        if normalizer is not None:
            normalizer.accumulate(next_obs)
            final_obs = normalizer.normalize(final_obs)
        buffer.final_obs[step].copy_(final_obs)
    return next_obs


@torch.no_grad()
def bootstrap_truncated(policy: ActorCritic, buffer: RolloutBuffer, gamma: float) -> None:
    """reward += gamma * V(final obs) where an episode was cut by a time limit (one host sync)."""
    where = buffer.truncated.nonzero(as_tuple=True)
    if where[0].numel():
        buffer.rewards[where] += gamma * policy.value(buffer.final_obs[where])
