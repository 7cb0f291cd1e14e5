"""PPO's loss and its gradient for the MLP policies, with the backward pass written out.

Why: on a CPU, a minibatch step of a small network is launch-bound. Autograd records a node
for every op of the forward pass and runs each node of the backward pass through its engine,
and PyTorch's CPU `tanh` is several times slower than its `sigmoid`. For an MLP actor and an
MLP critic the gradient is short enough to write down, so this module computes it directly,
with the same result as autograd on `ppo._autograd_loss` to float32 rounding
(tests/test_trainer_ppo.py compares the two), in about half the time.

Notation for one minibatch of B samples (all means are over the minibatch):

    policy loss  L_pi = mean(max(-A r, -A clip(r, 1-eps, 1+eps)))   r = pi(a|s) / pi_old(a|s)
                 (a2c: mean(-A r))
    value loss   L_v  = 0.5 mean(w (V(s) - R)^2)                      (w: PER weights, or 1)
    entropy      H    = mean(entropy of pi(.|s))
    loss              = L_pi - ent_coef H + vf_coef L_v

    dL/dlog pi(a|s) = -A r [the unclipped term is the larger one] / B
    dL/dV(s)        = vf_coef w (V(s) - R) / B

Categorical head (logits z, probabilities p):
    dlog p_a / dz = onehot(a) - p          dH_i / dz = -p (log p + H_i)
Gaussian head (mean mu, log std sigma_log, z = (a - mu) / sigma):
    dlog pi / dmu = z / sigma              dlog pi / dsigma_log = z^2 - 1       dH / dsigma_log = 1

and each layer y = tanh(x W^T + b) passes back dW = g'^T x, db = sum(g'), dx = g' W with
g' = g (1 - y^2).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.models import LOG_2PI, ActorCritic


def supports(policy: ActorCritic, clip_vloss: bool) -> bool:
    """Written out for the MLP policies (the convolutional one and the clipped value loss use autograd)."""
    return policy.torso is None and not clip_vloss


@torch.no_grad()
def ppo_loss_and_gradient(policy: ActorCritic, obs: Tensor, actions: Tensor, old_log_probs: Tensor,
                          advantages: Tensor, returns: Tensor, value_weights: Tensor | None,
                          clip_coef: float, ent_coef: float, vf_coef: float,
                          unclipped: bool) -> tuple[Tensor, Tensor]:
    """Write d(loss)/d(parameter) into every parameter's `.grad` (overwriting it).

    Returns (policy loss, value loss, entropy) as one tensor and log(pi / pi_old) per sample.
    """
    batch = obs.shape[0]
    inputs = obs.reshape(batch, -1)
    head, actor_activations = _forward(policy.actor, inputs)
    value, critic_activations = _forward(policy.critic, inputs)
    value = value.squeeze(-1)

    if policy.discrete:
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
        entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum().expand(batch)

    log_ratio = new_log_prob - old_log_probs
    ratio = log_ratio.exp()
    unclipped_term = -advantages * ratio
    if unclipped:
        policy_terms, active = unclipped_term, None
    else:
        clipped_term = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
        policy_terms = torch.maximum(unclipped_term, clipped_term)
        active = unclipped_term >= clipped_term   # where the gradient flows through r
    value_error = value - returns
    weighted_error = value_error if value_weights is None else value_error * value_weights
    losses = torch.stack((policy_terms.mean(), 0.5 * (weighted_error * value_error).mean(), entropy.mean()))

    # dL/dlog pi(a|s) per sample
    grad_log_prob = unclipped_term.mul_(1.0 / batch)
    if active is not None:
        grad_log_prob.mul_(active)
    if policy.discrete:
        grad_head = (one_hot - probs).mul_(grad_log_prob.unsqueeze(-1))
        grad_head.addcmul_(probs, log_probs + entropy.unsqueeze(-1), value=ent_coef / batch)
    else:
        grad_head = standardized * inverse_std * grad_log_prob.unsqueeze(-1)
        grad_log_std = (standardized.square() - 1.0).mul_(grad_log_prob.unsqueeze(-1)).sum(0)
        policy.log_std.grad.copy_(grad_log_std.sub_(ent_coef))
    _backward(policy.actor, actor_activations, grad_head)
    _backward(policy.critic, critic_activations, weighted_error.mul_(vf_coef / batch).unsqueeze(-1))
    return losses, log_ratio



def _forward(mlp: nn.Sequential, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The MLP's output and the input of each of its Linear layers."""
    linears = [module for module in mlp if isinstance(module, nn.Linear)]
    inputs = []
    for linear in linears[:-1]:
        inputs.append(x)
        # tanh(z) = 2 sigmoid(2z) - 1, in place on the matmul's output (which already holds 2z).
        x = torch.addmm(linear.bias, x, linear.weight.t(), beta=2.0, alpha=2.0).sigmoid_().mul_(2.0).sub_(1.0)
    inputs.append(x)
    last = linears[-1]
    return torch.addmm(last.bias, x, last.weight.t()), inputs


def _backward(mlp: nn.Sequential, inputs: list[Tensor], grad_output: Tensor) -> None:
    """Back-propagate dL/d(output) through the MLP into its parameters' `.grad`."""
    linears = [module for module in mlp if isinstance(module, nn.Linear)]
    for index in reversed(range(len(linears))):
        linear, x = linears[index], inputs[index]
        torch.mm(grad_output.t(), x, out=linear.weight.grad)
        torch.sum(grad_output, 0, out=linear.bias.grad)
        if index > 0:  # x = tanh(...): through the activation, d tanh = 1 - tanh^2
            grad_x = grad_output.mm(linear.weight)
            grad_output = torch.addcmul(grad_x, grad_x * x, x, value=-1.0)
