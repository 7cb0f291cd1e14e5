"""Experience gathered by an actor and learned from by a learner: the one batch format and the one
interface between them.

An actor (a process of its own, maybe on another machine: trainer/cluster/) plays the policy it
was last sent in its own envs for `num_steps` steps and sends one `ExperienceBatch`; the learner's
algorithm (IMPALA / APPO: trainer/algos/impala.py; DQN / SAC fed Ape-X style:
trainer/algos/replay_feed.py) takes batches from
an `ExperienceSource` and hands new weights back through it. Without actors the algorithm fills
the same batch from its own env (`policy_version` = its own, so no lag), so there is one learning
code path whoever acted.

All tensors are time-major: T = num_steps rows of N = num_envs envs (the actor's config is the
learner's, so every batch of a run has the same shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import Tensor, nn


class ExperienceClosed(RuntimeError):
    """The source will hand out no more batches (the run is stopping)."""


@dataclass
class ExperienceBatch:
    obs: Tensor  # (T, N, *obs_shape) float32, as the acting policy saw them (normalised if it normalises)
    actions: Tensor  # (T, N) int64 or (T, N, act_dim) float32, as sampled
    behaviour_log_probs: Tensor  # (T, N) log mu(a|s): the acting policy's
    rewards: Tensor  # (T, N) float32, as the env gave them
    terminated: Tensor  # (T, N) bool: the game ended the episode with this step
    truncated: Tensor  # (T, N) bool: a time limit cut it
    final_obs: Tensor  # (T, N, *obs_shape): the observation an episode ended on (valid where it ended)
    next_obs: Tensor  # (N, *obs_shape): after the last step, as the policy sees it (normalised): the bootstrap
    episodes: Tensor  # (E, 3) float32: return, length, score of the E episodes that ended during the batch
    # (EpisodeStats.take_finished; the learner counts them with add_finished)
    policy_version: int  # the learner's update count when the acting weights were published
    actor: int = 0  # who acted: 0 the learner's own env, else the actor's number in the run
    sequence: int = 0  # the actor's batch number, counting from 1 (a batch is never learned from twice)
    action_masks: Tensor | None = None  # (T, N, n) bool where the env masks actions
    priorities: Tensor | None = None  # (T, N) replay actors under use_per: first priorities, |TD error|
    # (trainer/algos/replay_feed.py)

    @property
    def steps(self) -> int:
        """Env steps in the batch (T * N)."""
        return self.rewards.numel()

    def arrived(self, num_steps: int, num_envs: int, device) -> ExperienceBatch:
        """This batch from an actor on the learner's `device`, once its shape is the run's
        (num_steps x num_envs); a batch of another shape is refused with what to fix."""
        if tuple(self.rewards.shape) != (num_steps, num_envs):
            raise ValueError(
                f"actor {self.actor} sent a batch of {tuple(self.rewards.shape)} steps x envs; this run's "
                f"num_steps x num_envs is {(num_steps, num_envs)}: actors must run the learner's config"
            )
        import torch

        moved = {
            item.name: value.to(device)
            for item in fields(self)
            if isinstance(value := getattr(self, item.name), torch.Tensor)
        }
        return replace(self, **moved)


class ExperienceSource(Protocol):
    """Where a learner's batches come from and where its weights go (trainer/cluster/ builds one
    for an actor-learner run and hands it to the algorithm through `Setup.experience`)."""

    def take(self) -> ExperienceBatch:
        """The oldest batch waiting; blocks until one arrives. Raises ExperienceClosed when the run
        is stopping (the loop then ends the run as it does after a stop)."""
        ...

    def publish(self, policy: nn.Module, version: int) -> None:
        """The learner's weights after update `version` (the source decides when actors get them:
        every `weights_every` updates)."""
        ...

    def stats(self) -> dict[str, float]:
        """Numbers for the update's metrics: queue_depth, dropped_batches, actors."""
        ...
