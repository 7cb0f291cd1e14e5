"""Action masks: which discrete actions are allowed, per observation, and the one way a network
gives the others probability 0.

A mask is a bool tensor (batch, n) (True: allowed), from the env (`VecEnv.action_masks`, a
Gymnasium env's `info["action_mask"]`) or from a caller (`predict(obs, action_masks=...)`, the
policy server's `action_mask`, the ONNX graph's `action_mask` input). `mask_logits` puts
`MASKED_LOGIT` in place of a forbidden action's logit: its softmax probability is exactly 0 in
float32, its log-probability a large finite negative number (so an entropy sum p log p is 0 for
it, never 0 x -inf = NaN, and no gradient flows to it), as sb3-contrib's MaskableCategorical does.
A row with no allowed action has no distribution to sample: `ActionMaskError`, never NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

MASKED_LOGIT = -1e8  # exp(-1e8 - logsumexp) is 0 in float32; finite, so 0 * it stays 0


class ActionMaskError(ValueError):
    """An action mask of the wrong shape or type, or one that allows no action for some row."""


def mask_logits(logits: Tensor, mask: Tensor) -> Tensor:
    """`logits` with every forbidden action's replaced by MASKED_LOGIT (a new tensor, so autograd
    passes no gradient to them)."""
    return logits.masked_fill(~mask, MASKED_LOGIT)


def masked_sample(head: Tensor, noise: Tensor, mask: Tensor) -> Tensor:
    """argmax(logits + Gumbel noise) over the allowed actions only, in place on `head`: a sample of
    the masked softmax. A Gumbel draw may be -inf (a uniform of exactly 0), so the sums are kept
    finite and forbidden actions set to -inf: one allowed action always wins."""
    finite = torch.finfo(head.dtype).min
    return head.add_(noise).clamp_(min=finite).masked_fill_(~mask, float("-inf")).argmax(-1)


def masked_argmax(values: Tensor, mask: Tensor) -> Tensor:
    """The index of the largest value among the allowed actions of each row."""
    return values.masked_fill(~mask, float("-inf")).argmax(-1)


def random_allowed(mask: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One allowed action per row, uniformly at random (DQN's exploration among valid actions)."""
    uniform = torch.rand(mask.shape, generator=generator, device=mask.device)
    return uniform.masked_fill_(~mask, -1.0).argmax(-1)


def check_some_allowed(mask: Tensor, what: str = "the action mask") -> None:
    """ActionMaskError naming the first row that allows no action (one host sync)."""
    empty = ~mask.any(-1)
    if bool(empty.any()):
        first = np.unravel_index(int(empty.flatten().nonzero()[0]), tuple(empty.shape))
        where = ", ".join(map(str, first))
        raise ActionMaskError(
            f"{what} allows no action at row [{where}]: every row needs at least one True "
            f"(an allowed action); a policy cannot pick among none"
        )


def as_mask(mask: Any, batch: int, n: int, device: torch.device | str = "cpu") -> Tensor:
    """A caller's mask (numpy, list or tensor of bools or 0 / 1; (n,) for a batch of one, else
    (batch, n)) as a checked bool tensor (batch, n) on `device`, or ActionMaskError saying what
    was expected."""
    tensor = mask if isinstance(mask, Tensor) else torch.as_tensor(np.asarray(mask))
    if tensor.dtype != torch.bool:
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex or not bool(((tensor == 0) | (tensor == 1)).all()):
            raise ActionMaskError(f"an action mask holds booleans (or 0 / 1), got dtype {tensor.dtype} values")
        tensor = tensor.bool()
    if tensor.dim() == 1 and batch == 1:
        tensor = tensor.unsqueeze(0)
    if tuple(tensor.shape) != (batch, n):
        expected = f"({n},) or ({batch}, {n})" if batch == 1 else f"({batch}, {n})"
        raise ActionMaskError(
            f"the action mask has shape {tuple(tensor.shape)}; expected {expected}: one flag per action "
            f"({n}) for each of the {batch} observation(s)"
        )
    check_some_allowed(tensor)
    return tensor.to(device)
