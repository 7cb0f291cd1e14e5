"""`EnsembleMLP`: n MLPs of one shape evaluated together, each layer one batched matmul.

    h_k = f(h_k W_k + b_k)      for every member k at once: torch.baddbmm(b, h, W) on
                                (n, B, in) x (n, in, out) -> (n, B, out)

SAC's twin critics are such a pair. On a CPU a gradient step of small MLPs is bound by the number
of operations (each a kernel launch and an autograd node), not by arithmetic, so one batched
matmul per layer instead of one Linear per layer and member halves the work of the critics'
forward and backward passes. The math is that of n separate MLPs: members never mix.

The members start as `torso.mlp` would build n separate MLPs one after the other (the same
orthogonal initialisation and the same random draws), so a seed gives the same weights as n
`mlp(...)` calls would.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.nets.torso import mlp


class EnsembleLinear(nn.Module):
    """n Linear layers of one shape: weight (n, in, out), bias (n, 1, out)."""

    def __init__(self, linears: list[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([linear.weight.detach().t() for linear in linears]))
        self.bias = nn.Parameter(torch.stack([linear.bias.detach().unsqueeze(0) for linear in linears]))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    def __init__(
        self,
        members: int,
        in_features: int,
        hidden: tuple[int, ...],
        out_features: int,
        out_gain: float,
        activation: type[nn.Module] = nn.ReLU,
    ):
        super().__init__()
        separate = [mlp(in_features, hidden, out_features, out_gain, activation) for _ in range(members)]
        linears = [[module for module in net if isinstance(module, nn.Linear)] for net in separate]
        self.members = members
        self.layers = nn.ModuleList(EnsembleLinear(list(same_layer)) for same_layer in zip(*linears))
        self.activation = activation()
        self.relu = activation is nn.ReLU  # the written-out gradient below knows ReLU's derivative

    def forward(self, x: Tensor) -> Tensor:
        """(B, in), the same input for every member, or (n, B, in) -> (n, B, out)."""
        if x.dim() == 2:
            x = x.expand(self.members, *x.shape)  # a view: no copy
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < last:
                x = self.activation(x)
        return x

    @torch.no_grad()
    def forward_with_inputs(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """`forward` without autograd (ReLU members): the output and each layer's input, for
        `write_gradient`."""
        if not self.relu:
            raise NotImplementedError("the written-out gradient knows ReLU members only")
        if x.dim() == 2:
            x = x.expand(self.members, *x.shape)
        inputs, last = [], len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            inputs.append(x)
            x = layer(x)
            if index < last:
                x.relu_()
        return x, inputs

    @torch.no_grad()
    def write_gradient(self, inputs: list[Tensor], grad_output: Tensor) -> None:
        """Back-propagate dL/d(output), (n, B, out), into every parameter's `.grad` (overwritten):
        per layer dW = x^T g, db = sum over the batch of g, and g x-side = g W^T times ReLU's
        derivative (1 where the layer's input, a ReLU output, is positive)."""
        for index in reversed(range(len(self.layers))):
            layer, x = self.layers[index], inputs[index]
            torch.bmm(x.transpose(1, 2), grad_output, out=layer.weight.grad)
            torch.sum(grad_output, 1, keepdim=True, out=layer.bias.grad)
            if index > 0:
                grad_output = torch.bmm(grad_output, layer.weight.transpose(1, 2)).mul_(x > 0)


def stack_separate_mlps(state: dict, prefix: str, names: list[str], into: str) -> None:
    """Rewrite, in place, a state dict of separate MLPs (`prefix + names[k]` an nn.Sequential of
    Linear layers) as the EnsembleMLP `prefix + into`: checkpoints written before the members
    were batched still load."""
    if f"{prefix}{names[0]}.0.weight" not in state:
        return
    linear_indices = sorted(
        {
            int(key[len(f"{prefix}{names[0]}.") :].split(".")[0])
            for key in state
            if key.startswith(f"{prefix}{names[0]}.")
        }
    )
    for layer_index, module_index in enumerate(linear_indices):
        weights = [state.pop(f"{prefix}{name}.{module_index}.weight") for name in names]
        biases = [state.pop(f"{prefix}{name}.{module_index}.bias") for name in names]
        state[f"{prefix}{into}.layers.{layer_index}.weight"] = torch.stack([weight.t() for weight in weights])
        state[f"{prefix}{into}.layers.{layer_index}.bias"] = torch.stack([bias.unsqueeze(0) for bias in biases])
