"""The layers every network here is made of: `layer` (a Linear with orthogonal initialisation),
`mlp`, `ConvTorso` for image and grid observations, and `body`, the part of a network a spec's
`model_type` chooses before its heads (an MLP's hidden layers, or the convolutional torso).

Weights use orthogonal initialisation as in the PPO and DQN literature: gain sqrt(2) for hidden
layers, the head's own gain for the last one.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from trainer.nets.activations import Tanh
from trainer.nets.spec import CNN_FEATURES, MLP_HIDDEN_SIZES, ModelError


def layer(in_features: int, out_features: int, gain: float) -> nn.Linear:
    linear = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


def mlp(
    in_features: int, hidden: tuple[int, ...], out_features: int, out_gain: float, activation: type[nn.Module] = Tanh
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [layer(in_features, size, math.sqrt(2)), activation()]
        in_features = size
    layers.append(layer(in_features, out_features, out_gain))
    return nn.Sequential(*layers)


def hidden_sizes(spec: dict) -> tuple[int, ...]:
    """An MLP spec's hidden layer sizes: `hidden_sizes` if given, else its `model_type`'s."""
    model_type = spec["model_type"]
    if model_type not in MLP_HIDDEN_SIZES:
        raise ModelError(f"unknown model_type {model_type!r}; known: {', '.join(MLP_HIDDEN_SIZES)}, ppo-cnn")
    return tuple(spec.get("hidden_sizes") or MLP_HIDDEN_SIZES[model_type])


def obs_size(spec: dict) -> int:
    return int(np.prod(spec["obs_shape"]))


class Flat(nn.Module):
    """(N, *obs_shape) -> (N, prod(obs_shape))."""

    def forward(self, obs: Tensor) -> Tensor:
        return obs.reshape(obs.shape[0], -1)


def body(spec: dict, activation: type[nn.Module] = nn.ReLU) -> tuple[nn.Module, int]:
    """The network before its heads, and the size of what it outputs: the convolutional torso for
    `ppo-cnn`, else the MLP's hidden layers (each followed by `activation`) on the flat observation."""
    if spec["model_type"] == "ppo-cnn":
        return ConvTorso(list(spec["obs_shape"]), spec.get("obs_scale", 1.0)), CNN_FEATURES
    layers: list[nn.Module] = [Flat()]
    size = obs_size(spec)
    for width in hidden_sizes(spec):
        layers += [layer(size, width, math.sqrt(2)), activation()]
        size = width
    return nn.Sequential(*layers), size


class ConvTorso(nn.Module):
    """Convolutions for (C, H, W), (H, W, C) or (H, W) observations -> CNN_FEATURES features.

    Large images (>= 36 px a side) get the Nature-DQN stack (8x8/4, 4x4/2, 3x3/1); small grids
    such as Snake's board get 3x3 convolutions that keep every cell visible.
    """

    def __init__(self, obs_shape: list[int], obs_scale: float):
        super().__init__()
        self.obs_scale = obs_scale
        if len(obs_shape) == 2:
            self.layout, channels, height, width = "hw", 1, obs_shape[0], obs_shape[1]
        elif obs_shape[-1] <= 4 < obs_shape[0]:
            self.layout, (height, width, channels) = "hwc", obs_shape
        else:
            self.layout, (channels, height, width) = "chw", obs_shape
        gain = math.sqrt(2)
        if min(height, width) >= 36:
            convs = [
                nn.Conv2d(channels, 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
            ]
        else:
            convs = [
                nn.Conv2d(channels, 32, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, 64, 3, stride=2 if min(height, width) > 8 else 1, padding=1),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, padding=1),
                nn.ReLU(),
            ]
        for module in convs:
            if isinstance(module, nn.Conv2d):
                nn.init.orthogonal_(module.weight, gain)
                nn.init.zeros_(module.bias)
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat_size = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(layer(flat_size, CNN_FEATURES, gain), nn.ReLU())

    def forward(self, obs: Tensor) -> Tensor:
        if self.layout == "hw":
            obs = obs.unsqueeze(1)
        elif self.layout == "hwc":
            obs = obs.permute(0, 3, 1, 2)
        if self.obs_scale != 1.0:
            obs = obs * self.obs_scale
        return self.linear(self.convs(obs))
