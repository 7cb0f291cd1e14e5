"""PPO's and A2C's settings: their own config keys, declared once, what one update reads, and the
rollout as the update takes it.

Torch-free on purpose: `import trainer` registers PPO and A2C with these keys
(trainer/algos/registry.py), and the studio builds its form from them without importing torch.
The keys every algorithm shares (`gamma`, `learning_rate`, the batch sizes, ...) stay in
trainer/config/keys.py.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from trainer.algos import priority_keys
from trainer.config.checks import Boolean, Integer, Real
from trainer.config.keys import PPO, ROLLOUT, key

if TYPE_CHECKING:
    from torch import Tensor

    from trainer.config.keys import TrainConfig

PPO_SUMMARY = "clipped surrogate objective, several epochs over each rollout (Schulman et al. 2017)"
A2C_SUMMARY = "advantage actor-critic: one unclipped pass over each rollout"

# What PPO's and A2C's update returns: names of trainer/config/metrics.py's registry (checked when they
# register). The mean statistics first, in the order ppo_update stacks them, then the rest.
PPO_MEAN_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
PPO_METRICS = (*PPO_MEAN_METRICS, "explained_variance", "gradient_steps")


@dataclass(frozen=True)
class PPOKeys:
    """PPO's and A2C's own config keys (YAML, `--set`, the API's keywords, the studio's form)."""

    update_epochs: int = key(4, "Passes over each batch per update (`a2c`: always 1).", Integer(maximum=1000), ROLLOUT)
    gae_lambda: float = key(0.95, "GAE lambda (0: one-step TD, 1: Monte Carlo).", Real(0.0, 1.0), PPO)
    clip_coef: float = key(0.2, "PPO clipping range of the probability ratio.", Real(0.0, None, low_open=True), PPO)
    clip_vloss: bool = key(False, "Clip the value update to `clip_coef` around the old values as well.", Boolean(), PPO)
    norm_adv: bool = key(True, "Normalise advantages per minibatch.", Boolean(), PPO)
    ent_coef: float = key(0.01, "Weight of the entropy bonus.", Real(0.0), PPO)
    vf_coef: float = key(0.5, "Weight of the value loss.", Real(0.0), PPO)
    max_grad_norm: float = key(0.5, "Clip the gradient's global norm to this.", Real(0.0, None, low_open=True), PPO)
    target_kl: float | None = key(
        None,
        "Stop an update's remaining epochs once the approximate KL divergence exceeds this (null: never).",
        Real(0.0, None, low_open=True, optional=True),
        PPO,
    )
    use_per: bool = priority_keys.use_per()
    per_alpha: float = priority_keys.per_alpha()
    per_beta: float = priority_keys.per_beta()


@dataclass(frozen=True)
class UpdateSettings(PPOKeys):
    """What one update reads: PPO's keys, the config's `mini_batch_size`, and `unclipped` (a2c:
    the plain policy gradient, no clipping)."""

    mini_batch_size: int = 256
    unclipped: bool = False

    @classmethod
    def from_config(cls, config: TrainConfig, unclipped: bool | None = None) -> UpdateSettings:
        """The settings of a validated config, taken by name (a key renamed fails here, loudly)."""
        values = {item.name: getattr(config, item.name) for item in fields(PPOKeys)}
        return cls(
            **values,
            mini_batch_size=config.mini_batch_size,
            unclipped=config.algo == "a2c" if unclipped is None else unclipped,
        )


def check_a2c(config: Any, given: set[str], problems: list[str]) -> None:
    """A2C makes one pass over each rollout: update_epochs is 1 (given otherwise: a problem), and
    its one gradient step takes the whole batch unless mini_batch_size / num_minibatches say otherwise."""
    if "update_epochs" in given and config.update_epochs != 1:
        problems.append(
            f"algo a2c makes one pass over each rollout, but update_epochs is {config.update_epochs}; "
            f"remove update_epochs (or set it to 1), or use algo: ppo for several epochs"
        )
    config.update_epochs = 1
    if not given & {"mini_batch_size", "num_minibatches"} and config.batch_size is not None:
        config.mini_batch_size, config.num_minibatches = config.batch_size, 1


@dataclass
class UpdateBatch:
    """One rollout flattened to (batch_size, ...)."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    advantages: Tensor
    returns: Tensor
    values: Tensor
    action_masks: Tensor | None = None  # (batch_size, n) bool where the env masks actions

    def take(self, rows: Tensor) -> UpdateBatch:
        """The samples at `rows` (a copy)."""
        return UpdateBatch(*(None if tensor is None else tensor[rows] for tensor in self._fields()))

    def slice(self, start: int, stop: int) -> UpdateBatch:
        """Samples start..stop-1 (views, no copy)."""
        return UpdateBatch(*(None if tensor is None else tensor[start:stop] for tensor in self._fields()))

    def _fields(self) -> tuple[Tensor | None, ...]:
        return self.obs, self.actions, self.log_probs, self.advantages, self.returns, self.values, self.action_masks
