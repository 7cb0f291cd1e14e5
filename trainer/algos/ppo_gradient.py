"""PPO's loss of one minibatch and how its gradient is computed (trainer/algos/ppo.py runs the update).

`ppo_loss`: the clipped surrogate, value and entropy terms as the paper writes them (Schulman et
al. 2017, eq. 9, negated to minimise), the reference every faster path is tested against;
`ppo_objective`: the same from the network's outputs (shared with trainer/algos/recurrent_ppo.py);
`ratio_statistics`: how far an epoch moved the policy; `choose_gradient`: autograd on `ppo_loss`,
or for the MLP policies the same gradient written out (trainer/algos/ppo_fast.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor, nn

from trainer.algos import ppo_fast
from trainer.algos.adam import Adam
from trainer.algos.ppo_settings import UpdateBatch, UpdateSettings


def ppo_loss(
    policy: nn.Module, batch: UpdateBatch, advantages: Tensor, value_weights: Tensor | None, settings: UpdateSettings
) -> tuple[Tensor, Tensor, Tensor]:
    """The PPO loss of one minibatch (Schulman et al. 2017, eq. 9, negated to minimise), the
    reference every faster path is tested against.

    Returns (loss, detached (policy loss, value loss, entropy), detached log(pi / pi_old) per
    sample). `advantages` are the minibatch's (normalised) advantages; `value_weights` the
    prioritised-replay importance weights, or None.
    """
    new_log_prob, entropy, new_value = policy.evaluate(batch.obs, batch.actions, batch.action_masks)
    return ppo_objective(new_log_prob, entropy, new_value, batch, advantages, value_weights, settings)


def ppo_objective(
    new_log_prob: Tensor,
    entropy: Tensor,
    new_value: Tensor,
    batch: UpdateBatch,
    advantages: Tensor,
    value_weights: Tensor | None,
    settings: UpdateSettings,
) -> tuple[Tensor, Tensor, Tensor]:
    """`ppo_loss` from the network's log pi(a|s), entropy and V(s) of the minibatch's samples
    (shared by the recurrent update, trainer/algos/recurrent_ppo.py, which gets them from sequences);
    `batch` gives log_probs, values and returns, flat as those."""
    log_ratio = new_log_prob - batch.log_probs
    ratio = log_ratio.exp()  # r = pi(a|s) / pi_old(a|s)

    # Policy loss: the clipped surrogate objective, -min(r A, clip(r, 1 - eps, 1 + eps) A).
    # (a2c: -r A, whose gradient at r = 1 is the plain policy gradient -A grad log pi.)
    surrogate = ratio * advantages
    if settings.unclipped:
        policy_loss = -surrogate.mean()
    else:
        clipped_surrogate = ratio.clamp(1.0 - settings.clip_coef, 1.0 + settings.clip_coef) * advantages
        policy_loss = -torch.min(surrogate, clipped_surrogate).mean()

    # Value loss: 0.5 (V(s) - R)^2 to the GAE returns R, optionally clipped around the old values.
    value_error = (new_value - batch.returns).square()
    if settings.clip_vloss:
        clipped_value = batch.values + (new_value - batch.values).clamp(-settings.clip_coef, settings.clip_coef)
        value_error = torch.max(value_error, (clipped_value - batch.returns).square())
    if value_weights is not None:
        value_error = value_error * value_weights
    value_loss = 0.5 * value_error.mean()

    # Entropy bonus: subtracted, so minimising the loss keeps the policy exploring.
    entropy_bonus = entropy.mean()
    loss = policy_loss - settings.ent_coef * entropy_bonus + settings.vf_coef * value_loss
    with torch.no_grad():
        return loss, torch.stack((policy_loss, value_loss, entropy_bonus)), log_ratio.detach()


@torch.no_grad()
def ratio_statistics(log_ratio: Tensor, clip_coef: float) -> Tensor:
    """(approx KL, clip fraction) over samples: how far the update moved the policy."""
    ratio_minus_one = log_ratio.exp() - 1.0
    approx_kl = (ratio_minus_one - log_ratio).mean()  # the k3 estimator of KL(old || new)
    clip_fraction = (ratio_minus_one.abs() > clip_coef).float().mean()
    return torch.stack((approx_kl, clip_fraction))


# The gradient: written out for the MLP policies, autograd for the rest.
# (optimizer, minibatch, its advantages, value weights, settings) -> writes every parameter's
# gradient; returns ((policy loss, value loss, entropy), log(pi / pi_old) per sample), detached.
Gradient = Callable[[Adam, UpdateBatch, Tensor, "Tensor | None", UpdateSettings], tuple[Tensor, Tensor]]


def choose_gradient(policy: nn.Module, settings: UpdateSettings) -> Gradient:
    """The one place that decides how the update gets the gradient of `ppo_loss`: written out
    (trainer/algos/ppo_fast.py) for the MLP policies it can derive (`structure_of`) unless
    clip_vloss (which it does not take), else autograd. It depends only on the network's
    structure and the settings, so PPO decides it once."""
    structure = ppo_fast.structure_of(policy)
    if structure is None or settings.clip_vloss:
        return functools.partial(_autograd_gradient, policy)
    return functools.partial(_written_out_gradient, structure)


def _autograd_gradient(
    policy: nn.Module,
    optimizer: Adam,
    batch: UpdateBatch,
    advantages: Tensor,
    value_weights: Tensor | None,
    settings: UpdateSettings,
) -> tuple[Tensor, Tensor]:
    optimizer.zero_grad()
    loss, losses, log_ratio = ppo_loss(policy, batch, advantages, value_weights, settings)
    loss.backward()
    return losses, log_ratio


def _written_out_gradient(
    structure: ppo_fast.MLPStructure,
    optimizer: Adam,
    batch: UpdateBatch,
    advantages: Tensor,
    value_weights: Tensor | None,
    settings: UpdateSettings,
) -> tuple[Tensor, Tensor]:
    return ppo_fast.ppo_loss_and_gradient(structure, batch, advantages, value_weights, settings)
