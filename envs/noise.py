"""Cheap uniform random numbers for the games' resets and spawns."""

from __future__ import annotations

import torch
from torch import Tensor


class UniformNoise:
    """Up to 4 uniform values per env from one 64-bit random draw per env.

    Resets need fresh random numbers every step for every env (only the finished ones use
    them, but picking those out would need a host sync). Drawing one int64 per env and
    cutting it into four 15-bit fields costs about half of `torch.rand(4, N)` on a CPU; the
    values are uniform on a grid of 2**15 points, fine enough for start states and spawns.
    """

    FIELD_BITS = 15

    def __init__(self, num_envs: int, generator: torch.Generator, device: torch.device):
        self.generator = generator
        self._bits = torch.empty(num_envs, dtype=torch.int64, device=device)
        self._fields = torch.empty(4, num_envs, dtype=torch.int64, device=device)  # reused: no new memory per draw
        shifts = torch.arange(4, device=device, dtype=torch.int64) * self.FIELD_BITS
        self._shifts = shifts.reshape(4, 1)
        self._field_mask = torch.tensor((1 << self.FIELD_BITS) - 1, device=device)
        self._affine: dict[tuple[float, float], tuple[Tensor, Tensor]] = {}

    def draw_fields(self, num_fields: int) -> Tensor:
        """(num_fields, N) int64 random integers in [0, 2**15) from a fresh 64-bit draw per env
        (field / 2**15 is what `draw` returns for [0, 1)). Scratch that the next draw rewrites."""
        self._bits.random_(generator=self.generator)
        fields = self._fields if num_fields == 4 else self._fields[:num_fields]
        torch.bitwise_right_shift(self._bits, self._shifts[:num_fields], out=fields)
        return fields.bitwise_and_(self._field_mask)

    def draw(self, num_fields: int, low: float = 0.0, high: float = 1.0, per_env: bool = False) -> Tensor:
        """(num_fields, N) float32 values uniform in [low, high); (N, num_fields) if per_env."""
        fields = self.draw_fields(num_fields)
        scale, offset = self._scale_and_offset(low, high)
        if per_env:  # written transposed, so that each env's fields lie together
            values = torch.empty(self._bits.shape[0], num_fields, device=self._bits.device)
            torch.mul(fields, scale, out=values.t())
        else:
            values = torch.mul(fields, scale)
        return values if low == 0.0 else values.add_(offset)  # field * scale >= 0: + 0.0 changes nothing

    def _scale_and_offset(self, low: float, high: float) -> tuple[Tensor, Tensor]:
        # float32 tensors, made once per range: a Python number operand costs as much as the op
        # with few envs, and gives the same float32 arithmetic.
        if (low, high) not in self._affine:
            self._affine[(low, high)] = (
                torch.tensor((high - low) / (1 << self.FIELD_BITS), dtype=torch.float32, device=self._bits.device),
                torch.tensor(low, dtype=torch.float32, device=self._bits.device),
            )
        return self._affine[(low, high)]
