"""PPO's loss and its gradient for the MLP policies, with the backward pass written out.

Why: on a CPU, a minibatch step of a small network is launch-bound. Autograd records a node
for every op of the forward pass and runs each node of the backward pass through its engine.
For an MLP actor and an MLP critic the gradient is short enough to write down, so this module
computes it directly: the same values as autograd on the reference loss `ppo_gradient.ppo_loss` to
float32 rounding (tests/test_trainer_ppo.py compares the two), in less time (README, "speed").

What it knows of the network it derives from the modules once, when the optimiser is built
(`structure_of`): the Linear layers and activations of each MLP (`models.mlp_layers`, with each
activation's forward and derivative from `models.ACTIVATIONS`), the head, and that these cover
every trained parameter. Anything else (the convolutional policy, an activation without a
table entry, an extra parameter) gets None and the update uses autograd.

Notation for one minibatch of B samples (all means are over the minibatch):

    policy loss  L_pi = mean(-min(r A, clip(r, 1-eps, 1+eps) A))      r = pi(a|s) / pi_old(a|s)
                 (a2c: mean(-r A))
    value loss   L_v  = 0.5 mean(w (V(s) - R)^2)                      (w: PER weights, or 1)
    entropy      H    = mean(entropy of pi(.|s))
    loss              = L_pi - ent_coef H + vf_coef L_v

    dL/dlog pi(a|s) = -A r [the unclipped term is the smaller one] / B
    dL/dV(s)        = vf_coef w (V(s) - R) / B

Categorical head (logits z, probabilities p):
    dlog p_a / dz = onehot(a) - p          dH_i / dz = -p (log p + H_i)
    (with an action mask, z of a forbidden action is replaced by a constant: its p is 0, and so
    is every term above for it, as autograd through the masking gives)
Gaussian head (mean mu, log std sigma_log, z = (a - mu) / sigma):
    dlog pi / dmu = z / sigma              dlog pi / dsigma_log = z^2 - 1       dH / dsigma_log = 1

and each layer y = f(x W^T + b) passes back dW = g'^T x, db = sum(g'), dx = g' W with
g' = g f'(.) (`Activation.backward`, from y).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from trainer.nets.activations import Layers, UnsupportedNetwork, mlp_backward, mlp_forward, mlp_layers
from trainer.nets.masks import mask_logits
from trainer.nets.policies import LOG_2PI, ActorCritic

if TYPE_CHECKING:
    from trainer.algos.ppo_settings import UpdateBatch, UpdateSettings


@dataclass(frozen=True)
class MLPStructure:
    """An ActorCritic's two MLPs as layer lists, checked once (see `structure_of`)."""

    policy: ActorCritic
    actor: Layers
    critic: Layers


def structure_of(module: nn.Module) -> MLPStructure | None:
    """The structure the written-out gradient needs, or None where it does not apply."""
    if not isinstance(module, ActorCritic) or module.torso is not None:
        return None
    try:
        actor, critic = mlp_layers(module.actor), mlp_layers(module.critic)
    except UnsupportedNetwork:
        return None
    action = module.spec["action"]
    outputs = action["n"] if module.discrete else action["dim"]
    if actor[-1][0].out_features != outputs or critic[-1][0].out_features != 1:
        return None
    # Every trained parameter must receive its gradient here; one it did not know of would
    # silently never move.
    covered = {id(p) for linear, _ in actor + critic for p in (linear.weight, linear.bias)}
    if not module.discrete:
        covered.add(id(module.log_std))
    if {id(p) for p in module.parameters() if p.requires_grad} != covered:
        return None
    return MLPStructure(module, actor, critic)


@torch.no_grad()
def ppo_loss_and_gradient(
    structure: MLPStructure,
    batch: UpdateBatch,
    advantages: Tensor,
    value_weights: Tensor | None,
    settings: UpdateSettings,
) -> tuple[Tensor, Tensor]:
    """Write d(loss)/d(parameter) into every parameter's `.grad` (overwriting it); the same
    arguments as `ppo_gradient.ppo_loss`, whose gradient this is (it does not take `clip_vloss`).

    Returns (policy loss, value loss, entropy) as one tensor and log(pi / pi_old) per sample.
    """
    if settings.clip_vloss:
        raise ValueError("the written-out gradient has no clipped value loss (clip_vloss): use ppo_gradient.ppo_loss")
    policy = structure.policy
    size = batch.obs.shape[0]
    inputs = batch.obs.reshape(size, -1)
    head, actor_inputs = mlp_forward(structure.actor, inputs)
    value, critic_inputs = mlp_forward(structure.critic, inputs)
    value = value.squeeze(-1)
    actions, ent_coef = batch.actions, settings.ent_coef

    if policy.discrete:
        if batch.action_masks is not None:  # forbidden actions: p = 0, so no gradient reaches them
            head = mask_logits(head, batch.action_masks)
        log_probs = head.log_softmax(-1)
        probs = log_probs.exp()
        one_hot = torch.zeros_like(head).scatter_(-1, actions.long().unsqueeze(-1), 1.0)
        new_log_prob = (log_probs * one_hot).sum(-1)
        entropy = -(probs * log_probs).sum(-1)
    else:
        log_std = policy.log_std
        inverse_std = (-log_std).exp()
        standardized = (actions - head) * inverse_std
        new_log_prob = (-0.5 * standardized.square() - log_std).sum(-1) - 0.5 * LOG_2PI * head.shape[-1]
        entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum().expand(size)

    log_ratio = new_log_prob - batch.log_probs
    ratio = log_ratio.exp()
    unclipped_term = -advantages * ratio
    if settings.unclipped:
        policy_terms, active = unclipped_term, None
    else:
        clip_coef = settings.clip_coef
        clipped_term = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
        policy_terms = torch.maximum(unclipped_term, clipped_term)
        active = unclipped_term >= clipped_term  # where the gradient flows through r
    value_error = value - batch.returns
    weighted_error = value_error if value_weights is None else value_error * value_weights
    losses = torch.stack((policy_terms.mean(), 0.5 * (weighted_error * value_error).mean(), entropy.mean()))

    # dL/dlog pi(a|s) per sample
    grad_log_prob = unclipped_term.mul_(1.0 / size)
    if active is not None:
        grad_log_prob.mul_(active)
    if policy.discrete:
        grad_head = (one_hot - probs).mul_(grad_log_prob.unsqueeze(-1))
        grad_head.addcmul_(probs, log_probs + entropy.unsqueeze(-1), value=ent_coef / size)
    else:
        grad_head = standardized * inverse_std * grad_log_prob.unsqueeze(-1)
        grad_log_std = (standardized.square() - 1.0).mul_(grad_log_prob.unsqueeze(-1)).sum(0)
        policy.log_std.grad.copy_(grad_log_std.sub_(ent_coef))
    mlp_backward(structure.actor, actor_inputs, grad_head)
    mlp_backward(structure.critic, critic_inputs, weighted_error.mul_(settings.vf_coef / size).unsqueeze(-1))
    return losses, log_ratio
