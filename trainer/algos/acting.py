"""Acting: play a policy in an env for one batch of experience (trainer/algos/experience.py).

`act_batch` is what an actor process does per batch (trainer/cluster/) and what IMPALA / APPO do
without actors (trainer/algos/impala.py): the rollout of trainer/algos/rollout.py (`collect_rollout`,
the one acting loop), then the behaviour log-probabilities log mu(a|s) of the whole batch from the
policy's scorer (`score_steps`, which the learner scores batches with too), and the episodes that
ended during it from the env's `EpisodeStats` (`keep_finished` / `take_finished`, envs/stats.py),
so that a learner which never steps an env can count them (`add_finished`).

An actor process plays with `player_for(config, spec)`: a `PolicyPlayer` (this `act_batch`) for
IMPALA / APPO, Ape-X's `ReplayPlayer` (trainer/algos/replay_feed.py) for DQN / SAC.

Rewards stay as the env gave them (no reward scaling, no time-limit bootstrap: the learner
bootstraps truncated episodes from `final_obs` with its own critic). With norm_obs the policy's
observation statistics only accumulate here (IMPALA and APPO refuse norm_obs and norm_reward).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.algos.experience import ExperienceBatch
from trainer.algos.rollout import SCORE_CHUNK_ROWS, RolloutBuffer, collect_rollout
from trainer.nets.policies import ActorCritic


def act_batch(
    env,
    policy: ActorCritic,
    obs: Tensor,
    generator: torch.Generator,
    num_steps: int,
    policy_version: int,
    actor: int = 0,
    sequence: int = 0,
) -> tuple[ExperienceBatch, Tensor]:
    """Play `policy` in `env` (a VecEnv, envs/base.py) for `num_steps` steps of every env from its
    observations `obs`; returns the batch and the env observations the next batch starts from.

    `policy_version`, `actor` and `sequence` are copied into the batch (see ExperienceBatch). The
    batch's tensors are new ones, owned by the batch (safe to queue or send)."""
    env.stats.keep_finished()  # from the first batch on; later calls change nothing
    buffer = RolloutBuffer.allocate(num_steps, env.num_envs, tuple(obs.shape[1:]), policy, obs.device)
    next_obs = collect_rollout(env, policy, buffer, obs, generator, reward_scaler=None)
    behaviour_log_probs = score_steps(policy, buffer.obs, buffer.actions, buffer.action_masks)[0]
    with torch.no_grad():
        bootstrap_obs = policy.normalize_obs(next_obs)
    batch = ExperienceBatch(
        obs=buffer.obs,
        actions=buffer.actions,
        behaviour_log_probs=behaviour_log_probs,
        rewards=buffer.rewards,
        terminated=buffer.terminated,
        truncated=buffer.truncated,
        final_obs=buffer.final_obs,
        next_obs=bootstrap_obs,
        episodes=env.stats.take_finished(),
        policy_version=int(policy_version),
        actor=int(actor),
        sequence=int(sequence),
        action_masks=buffer.action_masks,
    )
    return batch, next_obs


class PolicyPlayer:
    """An IMPALA / APPO actor's network (`module`, which the learner's weights load into) and its acting."""

    def __init__(self, spec: dict):
        from trainer.nets.build import build_policy

        self.module = build_policy(spec)

    def act(self, env, obs: Tensor, generator: torch.Generator, num_steps: int, policy_version: int, **ids):
        return act_batch(env, self.module, obs, generator, num_steps, policy_version, **ids)


def player_for(config, spec: dict):
    """What an actor process plays with (trainer/cluster/actor.py): a replay algorithm's Ape-X
    player (trainer/algos/replay_feed.py), else the policy with `act_batch`."""
    from trainer.config.algorithm_keys import ALGORITHM_TABLE

    entry = ALGORITHM_TABLE.get(config.algo)
    if entry is not None and entry.replay:
        from trainer.algos.replay_feed import ReplayPlayer

        return ReplayPlayer(config, spec)
    return PolicyPlayer(spec)


@torch.no_grad()
def score_steps(
    policy: ActorCritic, obs: Tensor, actions: Tensor, action_masks: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """(log pi(a|s), V(s)), both (T, N), of a time-major batch's steps under `policy`'s current
    weights, by its scorer in chunks of about SCORE_CHUNK_ROWS samples (as `score_rollout` does):
    the actor's behaviour log-probabilities, the learner's target ones and values."""
    steps, num_envs = actions.shape[:2]
    rows_per_chunk = max(1, SCORE_CHUNK_ROWS // num_envs) * num_envs
    obs, actions = obs.flatten(0, 1), actions.flatten(0, 1)
    masks = None if action_masks is None else action_masks.flatten(0, 1)
    log_probs = torch.empty(steps * num_envs, device=obs.device)
    values = torch.empty(steps * num_envs, device=obs.device)
    score = policy.scorer()
    for first in range(0, steps * num_envs, rows_per_chunk):
        rows = slice(first, first + rows_per_chunk)
        log_probs[rows], values[rows] = score(obs[rows], actions[rows], None if masks is None else masks[rows])
    return log_probs.view(steps, num_envs), values.view(steps, num_envs)
