"""The activation table: each activation of an MLP as numbers a no-grad form can fold.

The forward pass is the modules' (`nn.Sequential` of `nn.Linear` and activations). The fast
no-grad forms (`FoldedMLP` in trainer/nets/fast_forward.py for the rollout, the written-out
gradient in trainer/algos/ppo_fast.py) are derived from those modules layer by layer
(`mlp_layers`), with each activation's forms taken from one table (`ACTIVATIONS`);
tests/test_trainer_ppo.py holds them to the modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from trainer.nets.spec import ModelError


@dataclass(frozen=True)
class Activation:
    """An elementwise activation written as f(z) = scale * kernel(gain * z) + shift, where
    `kernel` is a cheap in-place torch op. Every no-grad form of an MLP (`FoldedMLP`, the
    written-out gradient) is derived from these numbers, so adding an activation is one entry
    in `ACTIVATIONS`."""

    kernel: Callable[[Tensor], Tensor]  # in place
    gain: float
    scale: float
    shift: float
    backward: Callable[[Tensor, Tensor], Tensor]  # (dL/dy, y = f(z)) -> dL/dz

    def fast(self, z: Tensor) -> Tensor:
        """f(z) in a new tensor (the input is left alone)."""
        y = self.kernel(z.mul(self.gain) if self.gain != 1.0 else z.clone())
        return self._scale_shift_(y)

    def after_linear(self, linear: nn.Linear, x: Tensor) -> Tensor:
        """f(x W^T + b), with the gain folded into the matmul (one op fewer)."""
        z = torch.addmm(linear.bias, x, linear.weight.t(), beta=self.gain, alpha=self.gain)
        return self._scale_shift_(self.kernel(z))

    def _scale_shift_(self, y: Tensor) -> Tensor:
        if self.scale != 1.0:
            y.mul_(self.scale)
        if self.shift != 0.0:
            y.add_(self.shift)
        return y


def _tanh_backward(grad: Tensor, output: Tensor) -> Tensor:
    return torch.addcmul(grad, grad * output, output, value=-1.0)  # g (1 - tanh^2)


def _relu_backward(grad: Tensor, output: Tensor) -> Tensor:
    # g where the output is positive, else 0: the kernel autograd itself runs for ReLU, one pass
    # (`grad * (output > 0)` makes a bool tensor and promotes it: 4-6x slower on a CPU).
    return torch.ops.aten.threshold_backward(grad, output, 0)


# tanh(z) = 2 sigmoid(2z) - 1: PyTorch's exact CPU tanh kernel is several times slower than its
# sigmoid, and the two agree to 2e-7.
ACTIVATIONS: dict[type[nn.Module], Activation] = {
    nn.Tanh: Activation(Tensor.sigmoid_, gain=2.0, scale=2.0, shift=-1.0, backward=_tanh_backward),
    nn.ReLU: Activation(Tensor.relu_, gain=1.0, scale=1.0, shift=0.0, backward=_relu_backward),
}


class UnsupportedNetwork(ModelError):
    """A network with a layer that has no derived no-grad form (the caller falls back to the module)."""


def activation_of(module: nn.Module) -> Activation | None:
    """The table entry for an activation module (subclasses included), None if it has none."""
    for cls in type(module).__mro__:
        if cls in ACTIVATIONS:
            return ACTIVATIONS[cls]
    return None


def mlp_layers(mlp: nn.Module) -> list[tuple[nn.Linear, Activation | None]]:
    """An MLP as (Linear, its activation or None) pairs, the last one without activation.

    Raises UnsupportedNetwork, naming the layer, for anything else (a layer type or activation
    without an entry in ACTIVATIONS, two activations in a row, a Linear without bias)."""
    modules = list(mlp) if isinstance(mlp, nn.Sequential) else [mlp]
    supported = ", ".join(cls.__name__ for cls in ACTIVATIONS)
    layers: list[tuple[nn.Linear, Activation | None]] = []
    for index, module in enumerate(modules):
        if isinstance(module, nn.Linear) and module.bias is not None:
            if layers and layers[-1][1] is None:
                raise UnsupportedNetwork(f"layer {index} ({module}) follows a Linear without an activation")
            layers.append((module, None))
            continue
        activation = activation_of(module)
        if activation is None or not layers or layers[-1][1] is not None:
            raise UnsupportedNetwork(
                f"layer {index} ({module}) has no derived form: expected Linear (with bias) "
                f"layers, each followed by one of {supported}"
            )
        layers[-1] = (layers[-1][0], activation)
    if not layers or layers[-1][1] is not None:
        raise UnsupportedNetwork("the network must end with a Linear layer (the head)")
    return layers


class Tanh(nn.Tanh):
    """tanh; without autograd on the CPU (the rollout, `predict`) in its fast form from
    `ACTIVATIONS` (2 sigmoid(2x) - 1), since PyTorch's exact CPU tanh is several times slower."""

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu" or (torch.is_grad_enabled() and x.requires_grad):
            return torch.tanh(x)
        return ACTIVATIONS[nn.Tanh].fast(x)


# The written-out passes of an MLP given as `mlp_layers` (trainer/algos/ppo_fast.py, dqn_fast.py).

Layers = list[tuple[nn.Linear, Activation | None]]


def mlp_forward(layers: Layers, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The MLP's output and the input of each of its Linear layers."""
    inputs = []
    for linear, activation in layers:
        inputs.append(x)
        if activation is None:
            x = torch.addmm(linear.bias, x, linear.weight.t())
        else:
            x = activation.after_linear(linear, x)
    return x, inputs


def mlp_backward(layers: Layers, inputs: list[Tensor], grad_output: Tensor) -> None:
    """Back-propagate dL/d(output) through the MLP into its parameters' `.grad` (which
    `adam.Adam.check_parameters` has checked are still the optimiser's, before this step)."""
    for index in reversed(range(len(layers))):
        linear, x = layers[index][0], inputs[index]
        torch.mm(grad_output.t(), x, out=linear.weight.grad)
        torch.sum(grad_output, 0, out=linear.bias.grad)
        if index > 0:  # x is the previous layer's activation output
            grad_output = layers[index - 1][1].backward(grad_output.mm(linear.weight), x)
