"""SAC (Haarnoja et al. 2018) as CleanRL's sac_continuous_action.py writes it, on batched envs, read
top to bottom:

1. `collect`: `num_steps` steps of every env into the replay buffer (trainer/algos/replay.py):
   uniform random actions in the env's bounds until `learning_starts` env steps are done, then
   samples of the squashed Gaussian actor (trainer/nets/sac_actor.py). The buffer holds the raw
   observations and the actions in [-1, 1], the scale the critics take.
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

Observation normalisation (`norm_obs`) works as in PPO: the statistics stay fixed during a
`collect`, take its observations after it, and are saved with the policy. The buffer keeps raw
observations, normalised with the current statistics when sampled (as SB3's VecNormalize does for
its off-policy algorithms). `norm_reward` likewise scales the sampled n-step returns by the
current running standard deviation of the discounted return.

The playing network is `SquashedGaussianActor`; it plays tanh(mu(s)) after training (evaluate,
GIFs, ONNX, the policy server). The critics, their targets, the optimisers, alpha and the buffer
(`save_buffer`) are this algorithm's state. Continuous (Box) actions with finite bounds only.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.replay import ReplayBatch, ReplayBuffer, replay_state, restore_replay
from trainer.algos.sac_settings import SAC_METRICS, SAC_SUMMARY, SACKeys, check_sac
from trainer.algos.target_network import frozen_copy, polyak
from trainer.config.checks import ConfigError
from trainer.nets.normalization import EPSILON, RewardScaler
from trainer.nets.sac_actor import SquashedGaussianActor, TwinQ


class SAC(Algorithm):
    summary = SAC_SUMMARY
    keys = SACKeys
    metric_names = SAC_METRICS
    replay = True
    check_config = staticmethod(check_sac)

    def __init__(self, setup: Setup):
        super().__init__(setup)
        config, device = setup.config, setup.device
        if setup.reduce_mean is not None:
            raise ValueError(
                "algo sac learns in one process: its replay buffer is not shared between ranks; "
                "run it without nproc_per_node / a cluster (or use algo ppo there)"
            )
        if config.autotune and config.alpha <= 0.0:
            raise ConfigError(
                "alpha is 0 with autotune: true, but autotune scales alpha by factors (log alpha is learned), "
                "so it would stay 0; start it above 0 (e.g. alpha: 0.2), or set autotune: false to keep alpha 0"
            )
        # The actor refuses discrete actions and unbounded ones (a ModelError that names the fix).
        self.policy = SquashedGaussianActor({**setup.policy_spec, "network": "squashed-gaussian"}).to(device)
        self.critic = TwinQ(self.policy.spec).to(device)
        self.critic_target = frozen_copy(self.critic)
        action_dim = self.policy.action_size
        self.target_entropy = float(config.target_entropy if config.target_entropy is not None else -action_dim)
        self.log_alpha = torch.tensor(math.log(max(config.alpha, 1e-30)), device=device, requires_grad=True)
        self.actor_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.learning_rate)
        self.buffer = ReplayBuffer(
            config.buffer_size,
            config.num_envs,
            tuple(self.policy.spec["obs_shape"]),
            (action_dim,),
            torch.float32,
            device,
            config.gamma,
            config.n_step,
            config.use_per,
            config.per_alpha,
        )
        self.reward_scaler = RewardScaler(config.num_envs, config.gamma, device) if config.norm_reward else None
        self.steps_per_update = config.num_envs * config.num_steps
        self.gradient_step = 0  # gradient steps of the critics so far (the delayed actor steps count them)

    @property
    def alpha(self) -> Tensor:
        """The entropy coefficient: learned when `autotune`, else the config's `alpha`."""
        if self.setup.config.autotune:
            return self.log_alpha.detach().exp()
        return torch.tensor(self.setup.config.alpha, device=self.setup.device)

    # -- 1. acting ------------------------------------------------------------------------------

    def start(self, obs: Tensor) -> None:
        if self.policy.obs_normalizer is not None:  # start from the statistics of the first observations
            self.policy.obs_normalizer.accumulate(obs)
            self.policy.obs_normalizer.commit(self.setup.reduce_sum)

    @torch.no_grad()
    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        setup, policy = self.setup, self.policy
        config, generator = setup.config, setup.generator
        for t in range(config.num_steps):
            if progress.global_step + t * config.num_envs < config.learning_starts:
                # Uniform in [-1, 1], so uniform in the env's bounds once scaled.
                shape = (config.num_envs, policy.action_size)
                squashed = torch.rand(shape, generator=generator, device=setup.device) * 2.0 - 1.0
            else:
                squashed, _ = policy.sample(policy.normalize_obs(obs), generator)
            actions = policy.env_action(policy.to_env_scale(squashed))
            next_obs, reward, terminated, truncated, info = setup.env.step(actions)
            self.buffer.add(obs, squashed, reward, info["final_obs"], terminated, truncated)
            if policy.obs_normalizer is not None:
                policy.obs_normalizer.accumulate(next_obs)
            if self.reward_scaler is not None:
                self.reward_scaler.scale(reward, terminated | truncated)  # only its statistics are used
            obs = next_obs
        if policy.obs_normalizer is not None:
            policy.obs_normalizer.commit(setup.reduce_sum)
        if self.reward_scaler is not None:
            self.reward_scaler.return_stats.commit(setup.reduce_sum)
        return obs

    # -- 2. learning ----------------------------------------------------------------------------

    def update(self, progress: Progress) -> dict:
        config = self.setup.config
        steps_done = progress.global_step + self.steps_per_update
        if steps_done < config.learning_starts or not self.buffer.can_sample(config.mini_batch_size):
            return self._metrics(None, None, 0)
        for optimizer in (self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer):
            for group in optimizer.param_groups:
                group["lr"] = progress.learning_rate
        beta = config.per_beta + (1.0 - config.per_beta) * min(1.0, progress.update / progress.num_updates)
        critic_totals = torch.zeros(4, device=self.setup.device)  # loss, mean Q, mean |TD error|, entropy
        actor_total = torch.zeros((), device=self.setup.device)
        actor_steps = 0
        for _ in range(config.gradient_steps):
            batch = self._normalized(self.buffer.sample(config.mini_batch_size, self.setup.generator, beta))
            critic_totals += self._critic_step(batch)
            self.gradient_step += 1
            if self.gradient_step % config.policy_frequency == 0:
                for _ in range(config.policy_frequency):
                    actor_total += self._actor_step(batch.obs)
                    actor_steps += 1
            polyak(self.critic_target, self.critic, config.tau)
        host = (critic_totals / config.gradient_steps).tolist() + [actor_total.item()]
        policy_loss = host[4] / actor_steps if actor_steps else None  # None: no actor step in this update
        return self._metrics(host[:4], policy_loss, config.gradient_steps)

    def _metrics(self, critic: list[float] | None, policy_loss: float | None, gradient_steps: int) -> dict:
        value_loss, q_mean, td_mean, entropy = critic if critic is not None else (None,) * 4
        return {
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "alpha": float(self.alpha),
            "q_value_mean": q_mean,
            "td_error_mean": td_mean,
            "buffer_size": self.buffer.size,
            "gradient_steps": gradient_steps,
        }

    def _normalized(self, batch: ReplayBatch) -> ReplayBatch:
        """The batch as the networks take it: observations normalised, returns scaled (`norm_obs`,
        `norm_reward`; both with the current statistics)."""
        batch.obs = self.policy.normalize_obs(batch.obs)
        batch.next_obs = self.policy.normalize_obs(batch.next_obs)
        if self.reward_scaler is not None:
            stats = self.reward_scaler.return_stats
            batch.returns = batch.returns * (stats.var + EPSILON).rsqrt().float()
        return batch

    def _critic_step(self, batch: ReplayBatch) -> Tensor:
        """One step of both critics towards the soft target; (loss, mean Q, mean |TD error|,
        entropy estimate -log pi(a'|s')), detached."""
        with torch.no_grad():
            next_actions, next_log_prob = self.policy.sample(batch.next_obs, self.setup.generator)
            next_q1, next_q2 = self.critic_target(batch.next_obs, next_actions)
            target = soft_target(batch.returns, batch.discounts, next_q1, next_q2, next_log_prob, self.alpha)
        q1, q2 = self.critic(batch.obs, batch.actions)
        error1, error2 = q1 - target, q2 - target
        loss = (batch.weights * error1.square()).mean() + (batch.weights * error2.square()).mean()
        _step(self.critic_optimizer, loss)
        with torch.no_grad():
            td_error = 0.5 * (error1.abs() + error2.abs())
            if self.setup.config.use_per:
                self.buffer.update_priorities(batch.indices, td_error)
            q_mean = 0.5 * (q1.mean() + q2.mean())
            return torch.stack((loss.detach(), q_mean, td_error.mean(), -next_log_prob.mean()))

    def _actor_step(self, obs: Tensor) -> Tensor:
        """One step of the actor (and of alpha when `autotune`) on a minibatch's observations; the
        actor loss, detached."""
        actions, log_prob = self.policy.sample(obs, self.setup.generator)
        q1, q2 = self.critic(obs, actions)
        loss = (self.alpha * log_prob - torch.min(q1, q2)).mean()
        _step(self.actor_optimizer, loss)
        if self.setup.config.autotune:  # on the log-probabilities the actor step saw (as SB3)
            _step(self.alpha_optimizer, alpha_loss(self.log_alpha, log_prob.detach(), self.target_entropy))
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
            "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler is not None else None,
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
        if self.reward_scaler is not None and state.get("reward_scaler") is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
        restore_replay(self.buffer, state, self.setup.log)


# ---------------------------------------------------------------------------------------------
# The formulas, on their own (tests/test_sac.py checks them against plain Python and autograd)


def soft_target(
    returns: Tensor, discounts: Tensor, next_q1: Tensor, next_q2: Tensor, next_log_prob: Tensor, alpha: Tensor | float
) -> Tensor:
    """returns + discounts * (min(Q1', Q2')(s', a') - alpha log pi(a'|s')): the critics' target."""
    return returns + discounts * (torch.min(next_q1, next_q2) - alpha * next_log_prob)


def alpha_loss(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """mean(-alpha (log pi(a|s) + target_entropy)): its gradient raises alpha while the policy's
    entropy (-log pi) is below the target, and lowers it while above."""
    return (-log_alpha.exp() * (log_prob + target_entropy)).mean()


def _step(optimizer: torch.optim.Optimizer, loss: Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
