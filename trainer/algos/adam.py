"""Adam (Kingma & Ba 2015) over one flat parameter vector, the optimiser of every algorithm here.

Two reasons to write it out: one tensor makes each step a handful of kernel launches instead of a
handful per layer (small networks are launch-bound on CPU), and constructing `torch.optim.Adam`
imports `torch._dynamo`, which adds about a second to every launch.
"""

from __future__ import annotations

import math
import operator

import torch
from torch import Tensor, nn


class OptimizerError(RuntimeError):
    """The module's parameters are no longer the ones the optimiser steps."""


class Adam:
    """Adam (Kingma & Ba 2015) over all parameters of a module at once.

    The parameters are re-pointed into one contiguous vector (and their gradients into another),
    so zeroing, clipping, all-reducing and stepping are each one operation on one tensor.
    `state_dict()` holds plain tensors and numbers (checkpoints load with weights_only=True).
    Built once per module, after the module is on its device.
    """

    def __init__(self, module: nn.Module, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-5):
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self.parameters = [p for _, p in named]
        self.flat_param, self.flat_grad = _flatten_into_views(self.parameters)
        # Where each parameter and its gradient must stay (see check_parameters).
        self._names = [name for name, _ in named]
        self._data_ptrs = [p.data_ptr() for p in self.parameters]
        self._grads = [p.grad for p in self.parameters]
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.step_count = 0
        self.exp_avg = torch.zeros_like(self.flat_param)
        self.exp_avg_sq = torch.zeros_like(self.flat_param)

    def check_parameters(self) -> None:
        """Raise OptimizerError unless every parameter and its `.grad` are still views of the
        flat vectors (host-side pointer comparisons, no device work). Otherwise the step
        would update a vector the module no longer reads, or read gradients nobody writes."""
        # The common case in two C-level passes (about 4 us for ppo-small), the message after.
        if list(map(Tensor.data_ptr, self.parameters)) == self._data_ptrs and all(
            map(operator.is_, map(_grad_of, self.parameters), self._grads)
        ):
            return
        for name, parameter, data_ptr, grad in zip(self._names, self.parameters, self._data_ptrs, self._grads):
            if parameter.data_ptr() != data_ptr:
                raise OptimizerError(
                    f"parameter {name!r} was moved or replaced after the optimiser was built (by .to(), "
                    f".double(), assigning .data, ...), so a step would not change the model: move the "
                    f"model first, then build Adam(model)"
                )
            if parameter.grad is not grad:
                found = "None" if parameter.grad is None else "a tensor of its own"
                raise OptimizerError(
                    f"parameter {name!r} has .grad = {found}, not the optimiser's gradient vector "
                    f"(module.zero_grad() sets .grad to None): call optimizer.zero_grad() instead"
                )

    def zero_grad(self) -> None:
        self.flat_grad.zero_()

    def clip_grad_norm(self, max_norm: float) -> Tensor:
        """Scale the gradient so that its global L2 norm is at most max_norm (no host sync)."""
        norm = self.flat_grad.norm()
        self.flat_grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm

    @torch.no_grad()
    def step(self, learning_rate: float) -> None:
        self.step_count += 1
        grad = self.flat_grad
        self.exp_avg.lerp_(grad, 1.0 - self.beta1)  # m = b1 m + (1 - b1) g
        self.exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1.0 - self.beta2)
        bias_correction1 = 1.0 - self.beta1**self.step_count
        root_bias_correction2 = math.sqrt(1.0 - self.beta2**self.step_count)
        # p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), with the scalars gathered so that the
        # vector work is one sqrt, one add and one addcdiv.
        denominator = self.exp_avg_sq.sqrt().add_(self.eps * root_bias_correction2)
        self.flat_param.addcdiv_(
            self.exp_avg, denominator, value=-learning_rate * root_bias_correction2 / bias_correction1
        )

    def state_dict(self) -> dict:
        return {"step": self.step_count, "exp_avg": self.exp_avg.clone(), "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        if state["exp_avg"].shape != self.exp_avg.shape:
            raise ValueError(
                f"optimizer state has {state['exp_avg'].numel()} values, the model "
                f"{self.exp_avg.numel()}: the checkpoint belongs to a different model"
            )
        self.step_count = int(state["step"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])


def _grad_of(parameter: Tensor) -> Tensor | None:
    return parameter.grad


def flat_parameters(module: nn.Module) -> Tensor:
    """Move every parameter of `module` into views of one flat tensor, returned: a target network
    then follows its source in one operation (`flat.lerp_(source_flat, tau)`, `flat.copy_(...)`).
    In the order of `module.parameters()`, which is the order Adam(source) keeps for a copy of it."""
    parameters = list(module.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in parameters])
    offset = 0
    for parameter in parameters:
        size = parameter.numel()
        parameter.data = flat[offset : offset + size].view_as(parameter)
        offset += size
    return flat


def _flatten_into_views(parameters: list[nn.Parameter]) -> tuple[Tensor, Tensor]:
    """Move every parameter (and its gradient) into views of two flat tensors."""
    device = parameters[0].device
    total = sum(p.numel() for p in parameters)
    flat_param = torch.empty(total, device=device)
    flat_grad = torch.zeros(total, device=device)
    offset = 0
    for parameter in parameters:
        size = parameter.numel()
        flat_param[offset : offset + size].copy_(parameter.data.reshape(-1))
        parameter.data = flat_param[offset : offset + size].view_as(parameter)
        # backward() accumulates into an existing .grad in place, so gradients land in flat_grad.
        parameter.grad = flat_grad[offset : offset + size].view_as(parameter)
        offset += size
    return flat_param, flat_grad
