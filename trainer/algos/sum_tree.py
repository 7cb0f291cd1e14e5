"""Proportional prioritised sampling (Schaul et al. 2016) as a sum tree in one tensor.

Leaf i holds the priority p_i of item i; every inner node the sum of its two children, so the
root holds the total. Drawing an item with probability p_i / total is a walk from the root: go
left while the value is below the left sum, else subtract it and go right. Both operations are
batched: `set` rewrites a batch of leaves and then their ancestors level by level, `find` walks a
batch of values down together; each costs log2(capacity) tensor operations, with no Python loop
over items. Sums are kept in float64, so that millions of leaves add up without drift.
"""

from __future__ import annotations

import torch
from torch import Tensor


class SumTree:
    def __init__(self, capacity: int, device: torch.device | str = "cpu"):
        self.capacity = int(capacity)
        self.depth = max(1, (self.capacity - 1).bit_length())
        self.leaves = 1 << self.depth  # the leaves sit at [leaves, 2 * leaves)
        self.tree = torch.zeros(2 * self.leaves, dtype=torch.float64, device=device)

    @property
    def total(self) -> Tensor:
        return self.tree[1]

    def get(self, indices: Tensor) -> Tensor:
        return self.tree[indices + self.leaves]

    def set(self, indices: Tensor, priorities: Tensor) -> None:
        """Leaves `indices` take `priorities` (>= 0); then every ancestor is summed again."""
        nodes = indices.long() + self.leaves
        self.tree[nodes] = priorities.to(self.tree.dtype)
        for _ in range(self.depth):
            nodes = torch.unique(nodes // 2)
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def find(self, values: Tensor) -> Tensor:
        """The leaf of each value in [0, total): the first whose running sum of priorities exceeds it."""
        values = values.to(self.tree.dtype).clone()
        nodes = torch.ones_like(values, dtype=torch.long)
        for _ in range(self.depth):
            left = self.tree[2 * nodes]
            # Right when the value is past the left sum, and there is something on the right
            # (rounding must never land on an empty leaf).
            right = (values >= left) & (self.tree[2 * nodes + 1] > 0)
            values = torch.where(right, values - left, values)
            nodes = 2 * nodes + right.long()
        return nodes - self.leaves

    def state_dict(self) -> dict:
        return {"tree": self.tree}

    def load_state_dict(self, state: dict) -> None:
        self.tree.copy_(state["tree"])
