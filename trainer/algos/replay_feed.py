"""Ape-X (Horgan et al. 2018): actors feed the replay buffer of one DQN / SAC learner.

    actor (trainer/cluster/actor.py)                     learner (DQN / SAC with setup.experience)
    ReplayPlayer.act: num_steps steps of its envs   ->   ReplayFeed.take: the batch into the buffer
      epsilon-greedy (DQN) / samples (SAC), with           (its priorities, or the largest seen),
      the newest weights it was sent; under PER the        then `gradient_steps` gradient steps;
      batch's 1-step |TD errors| as first priorities  <-   ReplayFeed.learned: weights every
                                                           `weights_every` updates, policy_lag

The batch is trainer/algos/experience.py's `ExperienceBatch` (the transport of IMPALA / APPO):
obs, actions (DQN: the index; SAC: the squashed action in [-1, 1], as the learner's own buffer
holds it), rewards, terminated, truncated, and `final_obs`, the observation every step led to (the
env's `info["final_obs"]`: the next observation, or the one an episode ended on), which the
learner writes as the step's next observation, as its own `collect` does. Its rows go into the
buffer one step of every env at a time; the last row of a batch counts as a cut (truncated), so
that an n-step window never runs from one actor's batch into the next one written (it stops there
and bootstraps from that step's observation, as at a time limit).

Exploration: DQN's actors follow the run's epsilon schedule (`exploration_*` keys) at the env step
of the weights they play (version x num_steps x num_envs), not Ape-X's fixed per-actor epsilons:
actors join and leave at any time, so their number is not known when one starts. SAC's actors
sample the squashed Gaussian, uniformly at random before `learning_starts`.

Priorities (`use_per`): the actor scores its batch with its copy of the networks the learner sent
(DQN: the Q-network and its target; SAC: the actor, critics, target critics and alpha), 1-step:
|Q(s, a) - (r + gamma (1 - terminated) V(s'))|, exactly the learner's TD error for the same
weights with n_step 1 (DQN; SAC's V(s') samples a' from the actor, so it is the learner's formula
with another draw); with n_step > 1 the first step's error stands in until the item's first replay.
Envs that mask actions are refused (a batch carries the masks of its own steps only, not of the
observation after its last step).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from trainer.algos.experience import ExperienceBatch
from trainer.algos.impala_settings import SOURCE_METRICS
from trainer.algos.replay import ReplayBuffer
from trainer.algos.replay_settings import FEED_METRICS


def shared_nets(config, policy: nn.Module, **for_priorities: nn.Module) -> nn.ModuleDict:
    """What the learner sends its actors: the playing network, and under `use_per` the networks
    the actors score their batches with (the same modules: no copy). The actor builds the same
    dict (`ReplayPlayer`), so the flat weights line up."""
    nets = {"policy": policy, **(for_priorities if config.use_per else {})}
    return nn.ModuleDict(nets)


# ---------------------------------------------------------------------------------------------
# The learner's side


class ReplayFeed:
    """Takes the actors' batches into a replay buffer and hands the learner's weights back."""

    def __init__(self, setup, nets: nn.ModuleDict):
        self.setup, self.nets = setup, nets
        self.published = False  # the source has this process's weights (after a resume: not yet)
        self.policy_lag: int | None = None

    def take(self, buffer: ReplayBuffer, progress) -> None:
        """The oldest batch waiting (blocks), written into `buffer`; its episodes are counted."""
        source, version = self.setup.experience, progress.update - 1  # updates learned so far
        if not self.published:
            source.publish(self.nets, version)
            self.published = True
        batch = self._arrived(source.take())
        self.setup.env.stats.add_finished(batch.episodes)
        self.policy_lag = version - batch.policy_version
        write_batch(buffer, batch)

    def learned(self, progress) -> dict:
        """After an update: the new weights to the source; the update's FEED_METRICS (null without actors)."""
        source = self.setup.experience
        metrics = dict.fromkeys(FEED_METRICS)
        if source is None:
            return metrics
        source.publish(self.nets, progress.update)
        stats = source.stats()
        metrics.update({name: stats[name] for name in SOURCE_METRICS if name in stats})
        metrics["policy_lag"] = self.policy_lag
        return metrics

    def _arrived(self, batch: ExperienceBatch) -> ExperienceBatch:
        config = self.setup.config
        if batch.action_masks is not None:
            raise ValueError(
                f"{config.algo} with actors does not take envs that mask actions (the buffer needs the mask "
                f"after each step); train it without actors"
            )
        return batch.arrived(config.num_steps, config.num_envs, self.setup.device)


def write_batch(buffer: ReplayBuffer, batch: ExperienceBatch) -> None:
    """The batch's T rows into the buffer, one step of every env at a time; the last row is cut
    (truncated) so that no n-step window crosses into the next batch written."""
    cut = batch.truncated.clone()
    cut[-1] = True
    for t in range(batch.rewards.shape[0]):
        priorities = None if batch.priorities is None else batch.priorities[t]
        buffer.add(
            batch.obs[t],
            batch.actions[t],
            batch.rewards[t],
            batch.final_obs[t],
            batch.terminated[t],
            cut[t],
            priorities=priorities,
        )


# ---------------------------------------------------------------------------------------------
# The actor's side


class ReplayPlayer:
    """An Ape-X actor's networks (`module`, which the learner's weights load into) and its acting."""

    def __init__(self, config, spec: dict):
        self.config = config
        if config.algo == "dqn":
            from trainer.nets.q_network import QNetwork

            q_spec = {**spec, "network": "q", "dueling": config.dueling}
            self.module = shared_nets(config, QNetwork(q_spec), target=QNetwork(q_spec))
        elif config.algo == "sac":
            from trainer.algos.sac_terms import LogAlpha
            from trainer.nets.sac_actor import SquashedGaussianActor, TwinQ

            policy = SquashedGaussianActor({**spec, "network": "squashed-gaussian"})
            critics = {"critic": TwinQ(policy.spec), "critic_target": TwinQ(policy.spec), "alpha": LogAlpha(0.0)}
            self.module = shared_nets(config, policy, **critics)
        else:
            raise ValueError(f"algo {config.algo} has no Ape-X actor (dqn and sac have)")

    @torch.no_grad()
    def act(
        self,
        env,
        obs: Tensor,
        generator: torch.Generator,
        num_steps: int,
        policy_version: int,
        actor: int = 0,
        sequence: int = 0,
    ) -> tuple[ExperienceBatch, Tensor]:
        """`num_steps` steps of every env of `env` from `obs` (as trainer/algos/acting.py's
        `act_batch`); the batch and the observations the next one starts from."""
        config, policy = self.config, self.module["policy"]
        if env.action_masks() is not None:
            raise ValueError(f"{config.algo} with actors does not take envs that mask actions")
        env.stats.keep_finished()
        step = policy_version * config.num_steps * config.num_envs  # the learner's env step of these weights
        rows: dict[str, list[Tensor]] = {name: [] for name in ("obs", "actions", "log_probs", "rewards")}
        rows.update(terminated=[], truncated=[], final_obs=[])
        for t in range(num_steps):
            at = step + t * config.num_envs
            if config.algo == "dqn":
                actions, env_actions, log_probs = self._epsilon_greedy(policy, obs, generator, at)
            else:
                actions, env_actions, log_probs = self._sample(policy, obs, generator, at)
            next_obs, reward, terminated, truncated, info = env.step(env_actions)
            for name, value in zip(rows, (obs, actions, log_probs, reward, terminated, truncated, info["final_obs"])):
                rows[name].append(value.clone())
            obs = next_obs
        stacked = {name: torch.stack(values) for name, values in rows.items()}
        batch = ExperienceBatch(
            obs=stacked["obs"],
            actions=stacked["actions"],
            behaviour_log_probs=stacked["log_probs"],
            rewards=stacked["rewards"].float(),
            terminated=stacked["terminated"].bool(),
            truncated=stacked["truncated"].bool(),
            final_obs=stacked["final_obs"],
            next_obs=obs.clone(),
            episodes=env.stats.take_finished(),
            policy_version=int(policy_version),
            actor=int(actor),
            sequence=int(sequence),
        )
        if config.use_per:
            batch.priorities = self.priorities(batch, generator)
        return batch, obs

    def _epsilon_greedy(self, policy, obs: Tensor, generator: torch.Generator, step: int):
        from trainer.algos.dqn_settings import epsilon_at

        epsilon = epsilon_at(self.config, step)
        num_envs, device = obs.shape[0], obs.device
        greedy = policy(obs).argmax(-1)
        random = torch.randint(policy.action_size, (num_envs,), generator=generator, device=device)
        explore = torch.rand(num_envs, generator=generator, device=device) < epsilon
        actions = torch.where(explore, random, greedy)
        # log mu(a|s) of epsilon-greedy: epsilon / n for every action, 1 - epsilon more for the greedy one
        probability = epsilon / policy.action_size + (1.0 - epsilon) * (actions == greedy).float()
        return actions, actions, probability.log()

    def _sample(self, policy, obs: Tensor, generator: torch.Generator, step: int):
        if step < self.config.learning_starts:  # uniform in [-1, 1]: uniform in the env's bounds
            shape = (obs.shape[0], policy.action_size)
            squashed = torch.rand(shape, generator=generator, device=obs.device) * 2.0 - 1.0
            log_probs = torch.full((obs.shape[0],), -policy.action_size * math.log(2.0), device=obs.device)
        else:
            squashed, log_probs = policy.sample(obs, generator)
        return squashed, policy.env_action(policy.to_env_scale(squashed)), log_probs

    @torch.no_grad()
    def priorities(self, batch: ExperienceBatch, generator: torch.Generator | None = None) -> Tensor:
        """(T, N) 1-step |TD errors| of the batch under this actor's networks."""
        nets, config = self.module, self.config
        obs, actions = batch.obs.flatten(0, 1), batch.actions.flatten(0, 1)
        next_obs = batch.final_obs.flatten(0, 1)
        discounts = config.gamma * (~batch.terminated.flatten()).float()
        rewards = batch.rewards.flatten()
        if config.algo == "dqn":
            errors = dqn_td_errors(nets["policy"], nets["target"], obs, actions, rewards, next_obs, discounts, config)
        else:
            from trainer.algos.sac_terms import soft_target

            next_actions, next_log_prob = nets["policy"].sample(next_obs, generator)
            next_q1, next_q2 = nets["critic_target"](next_obs, next_actions)
            alpha = nets["alpha"].log_alpha.exp() if config.autotune else config.alpha
            target = soft_target(rewards, discounts, next_q1, next_q2, next_log_prob, alpha)
            errors = (nets["critic"](obs, actions) - target).abs().mean(0)  # (|e1| + |e2|) / 2, as the learner
        return errors.abs().view(batch.rewards.shape)


def dqn_td_errors(policy, target, obs, actions, rewards, next_obs, discounts, config) -> Tensor:
    """Q(s, a) - (r + discount V(s')), V from trainer/algos/dqn_fast.py's `next_value` (the learner's)."""
    from trainer.algos.dqn_fast import next_value

    q = policy(obs).gather(1, actions.long().unsqueeze(1)).squeeze(1)
    return q - (rewards + discounts * next_value(policy, target, next_obs, None, config.double_q))
