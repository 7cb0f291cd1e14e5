"""IMPALA (Espeholt et al. 2018) and APPO: an actor-learner's learning side, read top to bottom.

1. `collect`: one `ExperienceBatch` (trainer/algos/experience.py) of `num_steps` steps from
   `num_envs` envs. Without actors (`setup.experience` None) the algorithm plays its own env
   (`act_batch`, trainer/algos/acting.py) with the weights it is learning, so the batch is never
   stale (policy lag 0). In an actor-learner run (trainer/cluster/) it takes the oldest batch the
   actors sent, played with weights a few updates old, and counts the batch's finished episodes in
   its own env's statistics (`EpisodeStats.add_finished`), so metrics, curves and Prometheus read
   them as in any run. Either way it then scores the batch with the current network, pi(a|s) and
   V(s), and corrects for the lag with V-trace (trainer/algos/vtrace.py): value targets v_s and
   policy-gradient advantages.
2. `update`: PPO's update (trainer/algos/ppo.py `ppo_update`, its loss, minibatches, gradient
   clipping and optimiser) on that batch:
       impala  one pass, the plain policy gradient  -A_t log pi(a_t|x_t)  (PPO's unclipped loss
               with pi_old = pi, as A2C), value loss 0.5 (V - v_s)^2, entropy bonus;
       appo    `update_epochs` passes in minibatches of PPO's clipped surrogate, with the ratio
               pi / mu taken against the behaviour policy mu that acted.
   Then the new weights go to the experience source (`publish`; it hands them to the actors every
   `weights_every` updates).

Per update it reports `policy_lag` (learner updates between the acting weights and this update)
and, with actors, the source's `queue_depth`, `dropped_batches` and `actors`.
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch
from torch import Tensor

from trainer.algos.acting import act_batch, score_steps
from trainer.algos.adam import Adam
from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.experience import ExperienceBatch
from trainer.algos.impala_settings import (
    APPO_METRICS,
    APPO_SUMMARY,
    IMPALA_METRICS,
    IMPALA_SUMMARY,
    SOURCE_METRICS,
    APPOKeys,
    ImpalaKeys,
    check_appo,
    check_impala,
)
from trainer.algos.ppo import ppo_update
from trainer.algos.ppo_gradient import choose_gradient
from trainer.algos.ppo_settings import UpdateBatch, UpdateSettings
from trainer.algos.vtrace import vtrace
from trainer.nets.build import build_policy

_UPDATE_KEYS = {item.name for item in fields(UpdateSettings)}  # the keys ppo_update reads


class IMPALA(Algorithm):
    """V-trace actor-critic: one policy-gradient step per batch (as many as its minibatches)."""

    summary = IMPALA_SUMMARY
    keys = ImpalaKeys
    metric_names = IMPALA_METRICS
    check_config = staticmethod(check_impala)
    proximal = False  # APPO: PPO's clipped surrogate against the behaviour policy, several epochs

    def __init__(self, setup: Setup):
        super().__init__(setup)
        config = setup.config
        self.policy = build_policy(setup.policy_spec).to(setup.device)
        if setup.broadcast is not None:
            setup.broadcast(self.policy)  # every rank starts from rank 0's weights
        self.optimizer = Adam(self.policy)
        own = {item.name: getattr(config, item.name) for item in fields(self.keys) if item.name in _UPDATE_KEYS}
        self.settings = UpdateSettings(**own, mini_batch_size=config.mini_batch_size, unclipped=not self.proximal)
        if not self.proximal:
            self.settings = replace(self.settings, update_epochs=1)
        self.gradient = choose_gradient(self.policy, self.settings)
        self.steps_per_update = config.num_steps * config.num_envs
        self.updates = 0  # updates learned: the version of the weights published after each
        self.published = False  # the source has the weights of the current version
        self.batch: UpdateBatch | None = None
        self.policy_lag = 0

    # -- 1. experience -------------------------------------------------------------------------

    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        setup, config = self.setup, self.setup.config
        if setup.experience is None:
            batch, obs = act_batch(setup.env, self.policy, obs, setup.generator, config.num_steps, self.updates)
        else:
            if not self.published:  # the actors' first weights (and after a resume, the resumed ones)
                setup.experience.publish(self.policy, self.updates)
                self.published = True
            batch = self._arrived(setup.experience.take())
            setup.env.stats.add_finished(batch.episodes)
        self.policy_lag = self.updates - batch.policy_version
        self.batch = self._corrected(batch)
        return obs

    def _arrived(self, batch: ExperienceBatch) -> ExperienceBatch:
        """An actor's batch on this device, once its shape is the run's."""
        return batch.arrived(self.setup.config.num_steps, self.setup.config.num_envs, self.setup.device)

    @torch.no_grad()
    def _corrected(self, batch: ExperienceBatch) -> UpdateBatch:
        """The batch scored by the current network and corrected by V-trace, flattened for the update."""
        policy, config = self.policy, self.setup.config
        target_log_probs, values = score_steps(policy, batch.obs, batch.actions, batch.action_masks)
        cut = batch.truncated & ~batch.terminated
        final_values = torch.zeros_like(values)
        where = cut.nonzero(as_tuple=True)  # one host sync
        if where[0].numel():
            final_values[where] = policy.value(batch.final_obs[where])
        vs, advantages = vtrace(
            batch.behaviour_log_probs,
            target_log_probs,
            batch.rewards,
            values,
            policy.value(batch.next_obs),
            batch.terminated,
            batch.truncated,
            final_values,
            config.gamma,
            config.vtrace_rho_bar,
            config.vtrace_c_bar,
        )
        # pi_old of the update's ratio: APPO clips pi / mu; IMPALA's pi / pi is 1, a plain policy gradient
        old_log_probs = batch.behaviour_log_probs if self.proximal else target_log_probs
        return UpdateBatch(
            obs=batch.obs.flatten(0, 1),
            actions=batch.actions.flatten(0, 1),
            log_probs=old_log_probs.flatten(),
            advantages=advantages.flatten(),
            returns=vs.flatten(),
            values=values.flatten(),
            action_masks=None if batch.action_masks is None else batch.action_masks.flatten(0, 1),
        )

    # -- 2. learning ---------------------------------------------------------------------------

    def update(self, progress: Progress) -> dict:
        setup = self.setup
        learned = ppo_update(
            self.policy,
            self.optimizer,
            self.batch,
            self.settings,
            progress.learning_rate,
            setup.generator,
            setup.reduce_mean,
            self.gradient,
        )
        self.updates += 1
        metrics = {name: learned[name] for name in self.metric_names if name in learned}
        metrics["policy_lag"] = self.policy_lag
        metrics.update(dict.fromkeys(SOURCE_METRICS))
        if setup.experience is not None:
            setup.experience.publish(self.policy, self.updates)
            stats = setup.experience.stats()
            metrics.update({name: stats[name] for name in SOURCE_METRICS if name in stats})
        return metrics

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.published = False


class APPO(IMPALA):
    """Asynchronous PPO: PPO's clipped surrogate on V-trace advantages, `update_epochs` passes."""

    summary = APPO_SUMMARY
    keys = APPOKeys
    metric_names = APPO_METRICS
    check_config = staticmethod(check_appo)
    proximal = True
