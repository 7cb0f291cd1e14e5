"""Target networks of the replay algorithms (DQN, SAC): a slowly following copy of a network that
the bootstrapped targets are computed with.

    polyak(target, source, tau)   target <- tau * source + (1 - tau) * target   (tau 1: a copy)
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def frozen_copy(network: nn.Module) -> nn.Module:
    """A copy that gradients never reach."""
    return copy.deepcopy(network).requires_grad_(False)


@torch.no_grad()
def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    for target_parameter, parameter in zip(target.parameters(), source.parameters(), strict=True):
        target_parameter.lerp_(parameter, tau)
