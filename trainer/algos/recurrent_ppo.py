"""PPO and A2C with a recurrent policy (`model_type: ppo-lstm`, trainer/nets/recurrent.py), as
sb3-contrib's RecurrentPPO and CleanRL's ppo_atari_lstm do it:

1. `collect_sequences`: the rollout, one step at a time, with the LSTM's state of every env
   carried from step to step (and from one rollout to the next) and zeroed where an episode ends
   (terminated, truncated, and so at every auto-reset). pi_old and V_old are the rollout's own,
   computed as it acts. The state each rollout started from is kept.
2. `recurrent_update`: minibatches of whole sequences. The envs are split, not the time: each
   minibatch is a set of envs' full T-step sequences, replayed from the rollout's initial state
   with the same resets, so the update's pi and V see exactly the history the rollout's did. The
   loss is PPO's (`ppo_objective` of trainer/algos/ppo.py), and so are the optimiser step, the
   statistics and `target_kl`.

`recurrent_form(PPO)` is the class PPO builds itself as when its spec is recurrent (`PPO.__new__`),
so `algo: ppo, model_type: ppo-lstm` is all a config says. The state of every env is part of the
algorithm's state (`state_dict`), so a resumed run is the same run. The keys that do not combine
with it are refused at validation (trainer/algos/recurrent_settings.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.algos.adam import Adam
from trainer.algos.base import Progress, Setup
from trainer.algos.ppo import PPO, _minibatch_step, _normalize_rows, compute_gae, end_of_epoch, update_statistics
from trainer.algos.ppo_gradient import ppo_objective
from trainer.algos.ppo_settings import UpdateSettings
from trainer.algos.rollout import RolloutBuffer, _finish_step
from trainer.nets.masks import check_some_allowed, mask_logits
from trainer.nets.normalization import RewardScaler
from trainer.nets.recurrent import RecurrentActorCritic


@functools.cache
def recurrent_form(cls: type[PPO]) -> type[PPO]:
    """`cls` (PPO, A2C or a subclass) learning from sequences."""
    return type(f"Recurrent{cls.__name__}", (SequenceTraining, cls), {"__module__": __name__})


class SequenceTraining:
    """What a recurrent policy changes in PPO: the rollout, the update and the state it keeps."""

    recurrent = True
    policy: RecurrentActorCritic
    buffer: RolloutBuffer

    def __init__(self, setup: Setup):
        super().__init__(setup)
        steps, num_envs, device = setup.config.num_steps, setup.config.num_envs, setup.device
        self.state = self.policy.initial_state(num_envs, device)  # (2, N, size): h and c of every env
        self.initial_state = self.state.clone()  # what the last rollout started from
        self.states_after = torch.zeros((steps, *self.state.shape), device=device)  # for the time-limit bootstrap
        self.sequences: Sequences | None = None

    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        setup, policy, buffer = self.setup, self.policy, self.buffer
        self.initial_state.copy_(self.state)
        obs = collect_sequences(
            setup.env, policy, buffer, obs, self.state, self.states_after, setup.generator, self.reward_scaler
        )
        bootstrap_truncated(policy, buffer, self.states_after, setup.config.gamma)
        with torch.no_grad():
            last_value = policy.value(policy.normalize_obs(obs), self.state)
        advantages, returns = compute_gae(
            buffer.rewards, buffer.values, buffer.dones, last_value, setup.config.gamma, self.settings.gae_lambda
        )
        self.commit_statistics()
        self.sequences = Sequences.of(buffer, advantages, returns, self.initial_state)
        return obs

    def update(self, progress: Progress) -> dict:
        setup = self.setup
        return recurrent_update(
            self.policy,
            self.optimizer,
            self.sequences,
            self.settings,
            progress.learning_rate,
            setup.generator,
            setup.reduce_mean,
        )

    def state_dict(self) -> dict:
        return {**super().state_dict(), "hidden_state": self.state.clone()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.state.copy_(state["hidden_state"])


# ---------------------------------------------------------------------------------------------
# 1. The rollout


@torch.inference_mode()
def collect_sequences(
    env,
    policy: RecurrentActorCritic,
    buffer: RolloutBuffer,
    next_obs: Tensor,
    state: Tensor,
    states_after: Tensor,
    generator: torch.Generator,
    reward_scaler: RewardScaler | None,
) -> Tensor:
    """Fill `buffer` with one rollout from `next_obs`, acting from `state` (2, N, size), which is
    updated in place: after the last step, zeroed where an episode ended. `states_after[t]` is
    the state after step t, before that reset (V of a truncated episode's final observation
    continues from it). Sets `buffer.dones`; returns the observations the next rollout starts from."""
    normalizer = policy.obs_normalizer
    steps, num_envs = buffer.rewards.shape
    noise = policy.action_noise(steps, num_envs, generator, buffer.rewards.device)
    std = None if policy.discrete else policy.log_std.exp()
    masked = env.action_masks() is not None
    if masked and buffer.action_masks is None:
        buffer.action_masks = torch.ones(
            (steps, num_envs, policy.action_size), dtype=torch.bool, device=buffer.rewards.device
        )
    for t in range(steps):
        obs = next_obs if normalizer is None else normalizer.normalize(next_obs)
        buffer.obs[t].copy_(obs)
        head, value, new_state = policy.step(obs, state)
        mask = None
        if masked:
            mask = buffer.action_masks[t]
            mask.copy_(env.action_masks())
            head = mask_logits(head, mask)
        action = policy.noisy_action(head.clone(), noise[t], std, mask)
        buffer.actions[t].copy_(action)
        buffer.log_probs[t].copy_(policy._log_prob(head, action))
        buffer.values[t].copy_(value)
        states_after[t].copy_(new_state)
        next_obs, reward, terminated, truncated, info = env.step(policy.env_action(action))
        done = terminated | truncated
        reward, final_obs = _finish_step(
            reward, terminated, truncated, next_obs, info["final_obs"], normalizer, reward_scaler
        )
        buffer.rewards[t].copy_(reward)
        buffer.terminated[t].copy_(terminated)
        buffer.truncated[t].copy_(truncated)
        buffer.final_obs[t].copy_(final_obs)
        torch.mul(new_state, (~done).to(new_state.dtype)[None, :, None], out=state)  # a new episode: no memory
    if masked:  # one host sync per rollout
        check_some_allowed(buffer.action_masks, f"{getattr(env, 'name', 'the env')}'s action_masks() at [step, env]")
    buffer.dones.copy_(buffer.terminated | buffer.truncated)
    return next_obs.clone()


@torch.no_grad()
def bootstrap_truncated(
    policy: RecurrentActorCritic, buffer: RolloutBuffer, states_after: Tensor, gamma: float
) -> None:
    """reward += gamma * V(final obs) where a time limit cut an episode that the game did not end,
    V continuing the episode's own history (one host sync)."""
    steps, envs = (buffer.truncated & ~buffer.terminated).nonzero(as_tuple=True)
    if steps.numel():
        state = states_after[steps, :, envs].transpose(0, 1)  # (2, K, size)
        buffer.rewards[steps, envs] += gamma * policy.value(buffer.final_obs[steps, envs], state)


# ---------------------------------------------------------------------------------------------
# 2. The update


@dataclass
class Sequences:
    """A rollout as whole sequences: (T, N, ...) tensors, or (T * E) flat ones in a minibatch of
    E envs (what `ppo_objective` reads: log_probs, values, returns)."""

    obs: Tensor  # (T, N, *obs_shape) as the policy saw them
    actions: Tensor  # (T, N) or (T, N, act_dim)
    action_masks: Tensor | None  # (T, N, n) bool, or None
    starts: Tensor  # (T, N) 1.0 where an episode starts with that step (not at t = 0: in initial_state)
    initial_state: Tensor  # (2, N, size): the state the rollout started from
    log_probs: Tensor  # (T, N) pi_old
    values: Tensor  # (T, N) V_old
    advantages: Tensor  # (T, N)
    returns: Tensor  # (T, N)

    @classmethod
    def of(cls, buffer: RolloutBuffer, advantages: Tensor, returns: Tensor, initial_state: Tensor) -> Sequences:
        starts = torch.cat((torch.zeros_like(buffer.dones[:1]), buffer.dones[:-1]))
        return cls(
            buffer.obs,
            buffer.actions,
            buffer.action_masks,
            starts,
            initial_state,
            buffer.log_probs,
            buffer.values,
            advantages,
            returns,
        )

    def envs(self, index: Tensor) -> Sequences:
        """The sequences of the envs at `index`; the per-sample values flattened to (T * E)."""

        def flat(tensor: Tensor) -> Tensor:
            return tensor[:, index].flatten(0, 1)

        return Sequences(
            self.obs[:, index],
            self.actions[:, index],
            None if self.action_masks is None else self.action_masks[:, index],
            self.starts[:, index],
            self.initial_state[:, index],
            flat(self.log_probs),
            flat(self.values),
            flat(self.advantages),
            flat(self.returns),
        )


def recurrent_update(
    policy: RecurrentActorCritic,
    optimizer: Adam,
    batch: Sequences,
    settings: UpdateSettings,
    learning_rate: float,
    generator: torch.Generator,
    reduce_gradients=None,
) -> dict[str, float]:
    """`ppo_update` over whole sequences: per epoch the envs are shuffled and split into
    minibatches of mini_batch_size / num_steps envs each (validation makes that whole)."""
    steps, num_envs = batch.log_probs.shape
    envs_per_minibatch = max(1, settings.mini_batch_size // steps)
    num_minibatches = max(1, num_envs // envs_per_minibatch)
    device = batch.log_probs.device
    gradient = functools.partial(_sequence_gradient, policy)
    loss_totals = torch.zeros(3, device=device)
    ratio_totals = torch.zeros(2, device=device)
    steps_taken = epochs_taken = 0
    for _ in range(settings.update_epochs):
        order = torch.randperm(num_envs, generator=generator, device=device)
        log_ratios = []
        for index in range(num_minibatches):
            minibatch = batch.envs(order[index * envs_per_minibatch : (index + 1) * envs_per_minibatch])
            advantages = minibatch.advantages
            if settings.norm_adv and advantages.numel() > 1:
                advantages = _normalize_rows(advantages)
            losses, log_ratio = _minibatch_step(
                gradient, optimizer, minibatch, advantages, None, settings, learning_rate, reduce_gradients
            )
            loss_totals += losses
            log_ratios.append(log_ratio)
            steps_taken += 1
        epochs_taken += 1
        if end_of_epoch(log_ratios, ratio_totals, settings):
            break
    return update_statistics(loss_totals / steps_taken, ratio_totals / epochs_taken, batch, steps_taken)


def _sequence_gradient(
    policy: RecurrentActorCritic,
    optimizer: Adam,
    minibatch: Sequences,
    advantages: Tensor,
    value_weights: Tensor | None,
    settings: UpdateSettings,
) -> tuple[Tensor, Tensor]:
    optimizer.zero_grad()
    new_log_prob, entropy, new_value = policy.evaluate(
        minibatch.obs, minibatch.actions, minibatch.initial_state, minibatch.starts, minibatch.action_masks
    )
    loss, losses, log_ratio = ppo_objective(
        new_log_prob, entropy, new_value, minibatch, advantages, value_weights, settings
    )
    loss.backward()
    return losses, log_ratio
