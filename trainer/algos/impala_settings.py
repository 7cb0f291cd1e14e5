"""IMPALA's and APPO's settings: their own config keys, declared once, and what their update
returns. Torch-free: `import trainer` registers both with these (trainer/algos/registry.py).

The loss coefficients they share with PPO (`ent_coef`, `vf_coef`, `max_grad_norm`, and APPO's
`update_epochs`, `clip_coef`, `norm_adv`) are PPO's declarations, taken from PPOKeys (a key of
several algorithms is declared once: trainer/config/algorithm_keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from trainer.algos.ppo_settings import PPO_MEAN_METRICS
from trainer.algos.ppo_settings import PPOKeys as _PPOKeys
from trainer.config.checks import Integer, Real
from trainer.config.keys import PPO, ROLLOUT, key

IMPALA_SUMMARY = "V-trace actor-critic: learns from actors' slightly stale experience (Espeholt et al. 2018)"
APPO_SUMMARY = "asynchronous PPO: the clipped surrogate on V-trace advantages, several epochs per batch"

# What their update returns (trainer/config/update_metrics.py names, checked when they register).
# Actor-learner numbers: from the experience source's stats(), null without actors.
SOURCE_METRICS = ("queue_depth", "dropped_batches", "actors")
IMPALA_METRICS = (
    "policy_loss",
    "value_loss",
    "entropy",
    "explained_variance",
    "gradient_steps",
    "policy_lag",
    *SOURCE_METRICS,
)
APPO_METRICS = (*PPO_MEAN_METRICS, "explained_variance", "gradient_steps", "policy_lag", *SOURCE_METRICS)


def _ppo_key(name: str) -> Any:
    """PPO's declaration of the key `name`, shared as it is."""
    declared = next(item for item in fields(_PPOKeys) if item.name == name)
    return field(default=declared.default, metadata=declared.metadata)


@dataclass(frozen=True)
class ImpalaKeys:
    """IMPALA's own config keys (APPO's are these and a few of PPO's)."""

    vtrace_rho_bar: float = key(
        1.0,
        "V-trace: clip the importance ratio pi / mu of the value targets and the policy gradient at this "
        "(the values converge to those of a policy between mu and pi; 1: pi's own).",
        Real(0.0, None, low_open=True),
        PPO,
    )
    vtrace_c_bar: float = key(
        1.0,
        "V-trace: clip the trace ratios at this (how far back a correction travels; at most `vtrace_rho_bar`).",
        Real(0.0, None, low_open=True),
        PPO,
    )
    weights_every: int = key(
        1,
        "Actors get the learner's new weights every this many updates (actor-learner runs).",
        Integer(minimum=1, maximum=10**6),
        ROLLOUT,
    )
    ent_coef: float = _ppo_key("ent_coef")
    vf_coef: float = _ppo_key("vf_coef")
    max_grad_norm: float = _ppo_key("max_grad_norm")
    norm_adv: bool = _ppo_key("norm_adv")


@dataclass(frozen=True)
class APPOKeys(ImpalaKeys):
    update_epochs: int = _ppo_key("update_epochs")
    clip_coef: float = _ppo_key("clip_coef")


def check_impala(config: Any, given: set[str], problems: list[str]) -> None:
    """V-trace learns from rewards and observations as the actors' envs gave them; IMPALA makes one
    gradient step per batch unless mini_batch_size / num_minibatches say otherwise."""
    _check_shared(config, problems)
    if not given & {"mini_batch_size", "num_minibatches"} and config.batch_size is not None:
        config.mini_batch_size, config.num_minibatches = config.batch_size, 1


def check_appo(config: Any, given: set[str], problems: list[str]) -> None:
    _check_shared(config, problems)


def _check_shared(config: Any, problems: list[str]) -> None:
    for name in ("norm_obs", "norm_reward"):
        if getattr(config, name):
            problems.append(
                f"algo {config.algo} learns from batches that actors played with their own copy of the weights, "
                f"with observations and rewards as the env gave them: remove {name} (or set it to false)"
            )
    if config.vtrace_c_bar > config.vtrace_rho_bar:
        problems.append(
            f"vtrace_c_bar ({config.vtrace_c_bar}) is above vtrace_rho_bar ({config.vtrace_rho_bar}): "
            f"the trace clip is at most the ratio clip (Espeholt et al. 2018); lower vtrace_c_bar"
        )
