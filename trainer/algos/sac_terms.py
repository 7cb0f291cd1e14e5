"""SAC's pieces that its Ape-X actors share with the learner (trainer/algos/replay_feed.py):
the critics' soft target and the module that holds log alpha. trainer/algos/sac.py uses them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def soft_target(
    returns: Tensor, discounts: Tensor, next_q1: Tensor, next_q2: Tensor, next_log_prob: Tensor, alpha: Tensor | float
) -> Tensor:
    """returns + discounts * (min(Q1', Q2')(s', a') - alpha log pi(a'|s')): the critics' target."""
    return returns + discounts * (torch.min(next_q1, next_q2) - alpha * next_log_prob)


class LogAlpha(nn.Module):
    """log alpha as a module's one parameter (the optimiser steps a module's parameters)."""

    def __init__(self, value: float):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(value))
