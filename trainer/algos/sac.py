"""SAC (Haarnoja et al. 2018) as CleanRL's sac_continuous_action.py writes it, on batched envs, read
top to bottom:

1. `collect`: `num_steps` steps of every env into the replay buffer (trainer/algos/replay.py):
   uniform random actions in the env's bounds until `learning_starts` env steps are done, then
   samples of the squashed Gaussian actor (trainer/nets/sac_actor.py). The buffer holds the raw
   observations and the actions in [-1, 1], the scale the critics take. In an Ape-X run
   (`setup.experience`, trainer/algos/replay_feed.py) actors play and their batch is written instead.
2. `update`: once `learning_starts` steps are done, `gradient_steps` steps, each on a minibatch of
   `mini_batch_size` replayed transitions:
       a', log pi(a'|s') ~ pi(.|s')                                      (the current actor)
       target       = returns + discounts * (min(Q1', Q2')(s', a') - alpha log pi(a'|s'))
       critic loss  = mean(w (Q1(s, a) - target)^2) + mean(w (Q2(s, a) - target)^2)   (w: PER, else 1)
   and every `policy_frequency` gradient steps, `policy_frequency` steps of the actor and alpha
   on the same minibatch (delayed policy updates, as CleanRL; they catch up on the steps skipped):
       a~, log pi(a~|s) ~ pi(.|s)                                         (reparameterised)
       actor loss   = mean(alpha log pi(a~|s) - min(Q1, Q2)(s, a~))
       alpha loss   = mean(-alpha (log pi(a~|s) + target_entropy))       (`autotune`; Haarnoja et al. 2018b)
   then the target critics follow by Polyak averaging with `tau`. With `use_per`, the sampled
   items' priorities become the mean absolute TD error of the two critics, and `per_beta` rises
   linearly to 1 over the run.

`norm_obs` and `norm_reward` are refused for replay algorithms when the config is read
(trainer/algos/replay_settings.py: statistics that move under a buffer of old samples), so the
networks take the env's observations and rewards as they are.

The playing network is `SquashedGaussianActor`; it plays tanh(mu(s)) after training (evaluate,
GIFs, ONNX, the policy server). The critics, their targets, the optimisers, alpha and the buffer
(`save_buffer`) are this algorithm's state. Continuous (Box) actions with finite bounds only.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trainer.algos.adam import Adam, flat_parameters
from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.replay import ReplayBatch, ReplayBuffer, one_process_only, per_beta_at, replay_state, restore_replay
from trainer.algos.replay_feed import ReplayFeed, shared_nets
from trainer.algos.sac_settings import SAC_METRICS, SAC_SUMMARY, SACKeys, check_sac
from trainer.algos.sac_terms import LogAlpha, soft_target
from trainer.algos.target_network import frozen_copy
from trainer.nets.sac_actor import SquashedGaussianActor, TwinQ

# What `_critic_step` returns, in its order (metrics of trainer/config/metrics.py)
CRITIC_METRICS = ("value_loss", "q_value_mean", "td_error_mean", "entropy")


class SAC(Algorithm):
    summary = SAC_SUMMARY
    keys = SACKeys
    metric_names = SAC_METRICS
    replay = True
    actions = "continuous"
    check_config = staticmethod(check_sac)

    def __init__(self, setup: Setup):
        super().__init__(setup)
        config, device = setup.config, setup.device
        one_process_only(setup)
        # The actor refuses discrete actions and unbounded ones (a ModelError that names the fix).
        self.policy = SquashedGaussianActor({**setup.policy_spec, "network": "squashed-gaussian"}).to(device)
        self.critic = TwinQ(self.policy.spec).to(device)  # Q1 and Q2 as one ensemble: (2, B) values
        self.critic_target = frozen_copy(self.critic)
        self.critic_target_flat = flat_parameters(self.critic_target)  # Polyak: one lerp_ of one vector
        action_dim = self.policy.action_size
        self.target_entropy = float(config.target_entropy if config.target_entropy is not None else -action_dim)
        self.entropy_coefficient = LogAlpha(math.log(max(config.alpha, 1e-30))).to(device)
        # trainer/algos/adam.py: each optimiser steps one flat vector
        self.actor_optimizer = Adam(self.policy)
        self.critic_optimizer = Adam(self.critic)
        self.alpha_optimizer = Adam(self.entropy_coefficient)
        self.buffer = ReplayBuffer.for_config(config, self.policy, device)
        self.steps_per_update = config.num_envs * config.num_steps
        self.learning_rate = config.learning_rate  # this update's (Progress.learning_rate)
        self.gradient_step = 0  # gradient steps of the critics so far (the delayed actor steps count them)
        # Ape-X (setup.experience): what the actors get, the actor (and the critics and alpha for priorities)
        critics = {"critic": self.critic, "critic_target": self.critic_target, "alpha": self.entropy_coefficient}
        self.feed = ReplayFeed(setup, shared_nets(config, self.policy, **critics))

    @property
    def log_alpha(self) -> Tensor:
        return self.entropy_coefficient.log_alpha

    @property
    def alpha(self) -> Tensor:
        """The entropy coefficient: learned when `autotune`, else the config's `alpha`."""
        if self.setup.config.autotune:
            return self.log_alpha.detach().exp()
        return torch.tensor(self.setup.config.alpha, device=self.setup.device)

    # -- 1. acting ------------------------------------------------------------------------------

    @torch.no_grad()
    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        setup, policy = self.setup, self.policy
        config, generator = setup.config, setup.generator
        if setup.experience is not None:  # Ape-X: the actors played; their batch into the buffer
            self.feed.take(self.buffer, progress)
            return obs
        for t in range(config.num_steps):
            if progress.global_step + t * config.num_envs < config.learning_starts:
                # Uniform in [-1, 1], so uniform in the env's bounds once scaled.
                shape = (config.num_envs, policy.action_size)
                squashed = torch.rand(shape, generator=generator, device=setup.device) * 2.0 - 1.0
            else:
                squashed, _ = policy.sample(obs, generator)
            actions = policy.env_action(policy.to_env_scale(squashed))
            next_obs, reward, terminated, truncated, info = setup.env.step(actions)
            self.buffer.add(obs, squashed, reward, info["final_obs"], terminated, truncated)
            obs = next_obs
        return obs

    # -- 2. learning ----------------------------------------------------------------------------

    def update(self, progress: Progress) -> dict:
        config = self.setup.config
        steps_done = progress.global_step + self.steps_per_update
        if steps_done < config.learning_starts or not self.buffer.can_sample(config.mini_batch_size):
            return {**self._metrics(None, None, None, 0), **self.feed.learned(progress)}
        self.learning_rate = progress.learning_rate
        beta = per_beta_at(config, progress)
        self.critic_optimizer.check_parameters()  # the written critic gradient lands in its vector
        critic_totals = torch.zeros(len(CRITIC_METRICS), device=self.setup.device)
        actor_total = torch.zeros((), device=self.setup.device)
        actor_steps = 0
        batches = self.buffer.batches(config.gradient_steps, config.mini_batch_size, self.setup.generator, beta)
        for batch in batches:
            critic_totals += self._critic_step(batch)
            self.gradient_step += 1
            if self.gradient_step % config.policy_frequency == 0:
                for _ in range(config.policy_frequency):
                    actor_total += self._actor_step(batch.obs)
                    actor_steps += 1
            # Polyak: target <- tau critic + (1 - tau) target, every parameter in one operation
            self.critic_target_flat.lerp_(self.critic_optimizer.flat_param, config.tau)
        host = torch.cat((critic_totals / config.gradient_steps, torch.stack((actor_total, self.alpha)))).tolist()
        critic, (actor_sum, alpha) = host[: len(CRITIC_METRICS)], host[len(CRITIC_METRICS) :]
        policy_loss = actor_sum / actor_steps if actor_steps else None  # None: no actor step in this update
        return {**self._metrics(critic, policy_loss, alpha, config.gradient_steps), **self.feed.learned(progress)}

    def _metrics(
        self, critic: list[float] | None, policy_loss: float | None, alpha: float | None, gradient_steps: int
    ) -> dict:
        """The update's metrics; None where nothing was learned (before `learning_starts`)."""
        metrics = dict.fromkeys(SAC_METRICS)
        metrics.update(zip(CRITIC_METRICS, critic or ()))
        metrics.update(policy_loss=policy_loss, buffer_size=self.buffer.size, gradient_steps=gradient_steps)
        metrics.update(alpha=float(self.alpha) if alpha is None else alpha)
        return metrics

    def _critic_step(self, batch: ReplayBatch) -> Tensor:
        """One step of both critics towards the soft target; (loss, mean Q, mean |TD error|,
        entropy estimate -log pi(a'|s')), detached."""
        with torch.no_grad():
            next_actions, next_log_prob = self.policy.sample(batch.next_obs, self.setup.generator)
            next_q1, next_q2 = self.critic_target(batch.next_obs, next_actions)
            target = soft_target(batch.returns, batch.discounts, next_q1, next_q2, next_log_prob, self.alpha)
        # The critic loss and its gradient, written out (no autograd: trainer/nets/ensemble.py):
        #   loss = mean(w e1^2) + mean(w e2^2),  dL/dQk = 2 w ek / B,  ek = Qk(s, a) - target
        q, inputs = self.critic.values_and_inputs(batch.obs, batch.actions)  # (2, B): Q1 and Q2
        error = q - target
        loss = (batch.weights * error.square()).mean(-1).sum()
        self.critic.write_gradient(inputs, (batch.weights * error).mul_(2.0 / error.shape[-1]))
        self.critic_optimizer.step(self.learning_rate)
        with torch.no_grad():
            td_error = error.abs().mean(0)  # (|e1| + |e2|) / 2
            if self.setup.config.use_per:
                self.buffer.update_priorities(batch.indices, td_error)
            return torch.stack((loss.detach(), q.mean(), td_error.mean(), -next_log_prob.mean()))

    def _actor_step(self, obs: Tensor) -> Tensor:
        """One step of the actor (and of alpha when `autotune`) on a minibatch's observations; the
        actor loss, detached."""
        actions, log_prob = self.policy.sample(obs, self.setup.generator)
        loss = (self.alpha * log_prob - self.critic(obs, actions).amin(0)).mean()  # amin: min(Q1, Q2)
        # The gradient reaches the actor only: the critics' weights need none (the engine skips it).
        _step(self.actor_optimizer, loss, self.learning_rate, inputs=self.actor_optimizer.parameters)
        if self.setup.config.autotune:  # on the log-probabilities the actor step saw (as SB3)
            optimizer = self.alpha_optimizer
            optimizer.flat_grad.copy_(alpha_loss_gradient(self.log_alpha, log_prob.detach(), self.target_entropy))
            optimizer.step(self.learning_rate)
        return loss.detach()

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "gradient_step": self.gradient_step,
            **replay_state(self.buffer, self.setup.config.save_buffer),
        }

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])  # in place: the optimiser holds this tensor
        self.gradient_step = int(state["gradient_step"])
        restore_replay(self.buffer, state, self.setup.log)


# ---------------------------------------------------------------------------------------------
# The formulas, on their own (tests/test_sac.py checks them against plain Python and autograd;
# `soft_target`, which Ape-X actors score their batches with too, is in trainer/algos/sac_terms.py)


def alpha_loss(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """mean(-alpha (log pi(a|s) + target_entropy)): its gradient raises alpha while the policy's
    entropy (-log pi) is below the target, and lowers it while above."""
    return (-log_alpha.exp() * (log_prob + target_entropy)).mean()


def alpha_loss_gradient(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """d alpha_loss / d log_alpha = -alpha mean(log pi(a|s) + target_entropy), written out: one
    scalar, without a backward pass (tests/test_sac.py holds it to autograd of `alpha_loss`)."""
    return -log_alpha.detach().exp() * (log_prob.mean() + target_entropy)


def _step(optimizer: Adam, loss: Tensor, learning_rate: float, inputs: list[Tensor] | None = None) -> None:
    optimizer.zero_grad()
    loss.backward(inputs=inputs)
    optimizer.step(learning_rate)
