"""DQN's loss and its gradient for an MLP Q-network, with the backward pass written out.

Why: on a CPU a gradient step of a small MLP is launch-bound (trainer/algos/ppo_fast.py says
more); for DQN's loss the gradient is one line, so this module computes it directly, without
recording the forward pass for autograd. tests/test_dqn.py holds it to autograd on the
reference loss (trainer/algos/dqn.py's, which the other networks still use).

For a minibatch of B items with targets y and importance weights w (1 when uniform):

    loss          = mean(w (Q(s, a) - y)^2)
    dL/dQ(s, a')  = 2 w (Q(s, a) - y) / B  for the action taken (a' = a), 0 for the others

and the MLP passes it back layer by layer (`activations.mlp_backward`: dW = g^T x, db = sum g,
dx = g W, through each activation's derivative).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.nets.activations import Layers, UnsupportedNetwork, mlp_backward, mlp_forward, mlp_layers
from trainer.nets.q_network import QNetwork
from trainer.nets.torso import Flat


def q_layers(network: QNetwork) -> Layers | None:
    """The Q-network as (Linear, activation) pairs, body then head; None where the gradient is
    left to autograd (dueling heads, the convolutional torso, a layer without a written form)."""
    if network.value_head is not None or not isinstance(network.body, nn.Sequential):
        return None
    modules = [module for module in network.body if not isinstance(module, Flat)]
    try:
        layers = mlp_layers(nn.Sequential(*modules, network.head))
    except UnsupportedNetwork:
        return None
    covered = {id(tensor) for linear, _ in layers for tensor in (linear.weight, linear.bias)}
    if covered != {id(parameter) for parameter in network.parameters()}:
        return None
    return layers


def q_loss_and_gradient(
    layers: Layers, obs: Tensor, actions: Tensor, target: Tensor, weights: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The loss, Q(s, a) and the TD error Q(s, a) - y (no autograd), with dL/dparameter written
    into each parameter's `.grad` (overwritten, not accumulated: no zero_grad needed)."""
    with torch.no_grad():
        q_all, inputs = mlp_forward(layers, obs.reshape(obs.shape[0], -1))
        taken = actions.unsqueeze(1)
        q = q_all.gather(1, taken).squeeze(1)
        td_error = q - target
        loss = (weights * td_error.square()).mean()
        grad_q = (weights * td_error).mul_(2.0 / len(td_error)).unsqueeze(1)
        mlp_backward(layers, inputs, torch.zeros_like(q_all).scatter_(1, taken, grad_q))
    return loss, q, td_error


@torch.no_grad()
def next_value(policy: QNetwork, target: QNetwork, next_obs: Tensor, allowed: Tensor | None, double_q: bool) -> Tensor:
    """V(s') of the bootstrap, (B,): double Q (the online network picks the action, the target
    scores it), else max_a Q_target(s', a); a over the actions `allowed` where the env masks them.
    The learner's targets and an Ape-X actor's initial priorities (trainer/algos/replay_feed.py)."""
    next_q = target(next_obs)
    if double_q:
        next_action = policy.greedy(policy(next_obs), allowed)
        return next_q.gather(1, next_action.unsqueeze(1)).squeeze(1)
    if allowed is None:
        return next_q.max(-1).values
    return next_q.masked_fill(~allowed, float("-inf")).max(-1).values
