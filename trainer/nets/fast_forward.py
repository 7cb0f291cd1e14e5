"""Fast no-grad forward passes of a policy, from a snapshot of its weights: `FoldedMLP` (an MLP
with its activations folded into the weights), `ActionSampler` (the rollout's actor) and
`RolloutScorer` (pi_old and V_old of a whole rollout). Each is the modules' function to float32
rounding (tests/test_trainer_ppo.py), valid while the weights do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from trainer.nets.activations import Activation, UnsupportedNetwork, mlp_layers

if TYPE_CHECKING:  # policies.py builds these; the annotation only names its class
    from trainer.nets.policies import ActorCritic


class FoldedMLP:
    """A no-grad copy of an MLP (see `mlp_layers`) for a batch of inputs, with each hidden
    layer's activation f(z) = scale * kernel(gain * z) + shift folded into the weights: layer i
    outputs the kernel's value s_i, and the next layer absorbs the scale and shift,

        h W^T + b = s (scale W)^T + (b + shift W 1),   then x gain for the next kernel

    (for tanh: s_i = sigmoid(2 z_i)). One matmul and one in-place kernel per layer: five tensor
    ops for ppo-small instead of ten (small batches are launch-bound). The same function as the
    module to float32 rounding. Valid while the weights do not change: build one per rollout.
    """

    @torch.no_grad()
    def __init__(self, mlp: nn.Module):
        self.layers: list[tuple[Tensor, Tensor, Callable[[Tensor], Tensor] | None]] = []  # (bias, weight^T, kernel)
        previous: Activation | None = None
        for linear, activation in mlp_layers(mlp):
            weight, bias = linear.weight, linear.bias
            if previous is not None:  # the input is the previous kernel's s, h = scale s + shift
                bias = bias + previous.shift * weight.sum(1)
                weight = previous.scale * weight
            if activation is not None:  # the output feeds kernel(gain z)
                bias, weight = activation.gain * bias, activation.gain * weight
            # A transposed view, as nn.Linear uses it: for narrow outputs (the heads) MKL is
            # several times faster with it than with a contiguous copy.
            self.layers.append(
                (bias.contiguous(), weight.contiguous().t(), None if activation is None else activation.kernel)
            )
            previous = activation

    @staticmethod
    def of(mlp: nn.Module | None) -> FoldedMLP | None:
        """The folded copy, or None where the network has no derived form (use the module)."""
        try:
            return None if mlp is None else FoldedMLP(mlp)
        except UnsupportedNetwork:
            return None

    @torch.no_grad()
    def __call__(self, x: Tensor) -> Tensor:
        for bias, weight_t, kernel in self.layers:
            x = torch.addmm(bias, x, weight_t)
            if kernel is not None:
                kernel(x)
        return x


class ActionSampler:
    """The actor for the rollout: actions only, no gradients, from a snapshot of the weights
    (`FoldedMLP` for the MLP policies; convolutional ones use their own forward pass). The
    log-probabilities and values the update needs are computed afterwards for the whole
    rollout at once (`RolloutScorer`). The randomness of a whole rollout is drawn up front
    (`noise`), so that each step only adds its share to the head."""

    def __init__(self, policy: ActorCritic):
        self.policy = policy
        self.std = None if policy.discrete else policy.log_std.detach().exp()
        self.actor = FoldedMLP.of(policy.actor) if policy.torso is None else None
        self.noise = policy.action_noise

    @torch.no_grad()
    def __call__(self, obs: Tensor, noise: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """Sampled actions for a batch of (normalised) observations and one step of `noise`
        (only among the allowed actions, with `action_mask`)."""
        if self.actor is None:
            head = self.policy.actor(self.policy._features(obs)[0])
        else:
            head = self.actor(obs.reshape(obs.shape[0], -1))
        return self.policy.noisy_action(head, noise, self.std, action_mask)


class RolloutScorer:
    """pi_old(a|s) and V_old(s) of a rollout's samples, chunk by chunk, from a snapshot of the
    weights (`FoldedMLP` for the MLP policies, made once for the whole rollout)."""

    def __init__(self, policy: ActorCritic):
        self.policy = policy
        folded = policy.torso is None
        self.actor = (FoldedMLP.of(policy.actor) if folded else None) or policy.actor
        self.critic = (FoldedMLP.of(policy.critic) if folded else None) or policy.critic

    @torch.no_grad()
    def __call__(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(log pi(action|obs), V(obs)) for a batch of (normalised) observations (of the masked
        distribution, with `action_mask`)."""
        actor_input, critic_input = self.policy._features(obs)
        head, value = self.actor(actor_input), self.critic(critic_input)
        return self.policy._log_prob(head, action, action_mask), value.squeeze(-1)
