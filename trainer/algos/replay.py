"""The replay buffer of DQN and SAC, made for batched envs: a ring of tensors on the learner's
device, written one step of every env at a time.

Storage is `rows` x `num_envs`: row t holds step t of every env (obs, action, reward, the
observation the step led to, terminated, done), so `add` is one indexed write per field and never
loops over envs. The observation a step led to is the env's `info["final_obs"]`: for an episode cut
by a time limit (truncated) that is the state to bootstrap from, not the next episode's first.

Sampling picks (row, env) items, uniformly or in proportion to priority^alpha (a `SumTree`; new
items get the largest priority seen). An item's n-step window is its env's next `n_step` rows,
cut at the first episode end:

    returns   = sum_{k <= last} gamma^k r_{t+k}
    next_obs  = the observation step t+last led to
    discounts = gamma^(last+1), or 0 when step t+last terminated the episode

so a learner's target is `returns + discounts * V(next_obs)`. For an env that masks actions, each
step also stores the allowed actions of the observation it led to (`next_masks`: all allowed after
an episode end, whose final observation's mask the env no longer has), so that V(next_obs) is a
max over allowed actions. The newest n_step - 1 rows are not
sampled until their windows are complete (their priority stays 0 until then). Its memory is
estimated before a run starts by trainer/config/preflight.py's `replay_bytes`, from this layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from trainer.algos.sum_tree import SumTree

PRIORITY_EPSILON = 1e-6  # keeps every stored item drawable


@dataclass
class ReplayBatch:
    obs: Tensor  # (B, *obs_shape)
    actions: Tensor  # (B, *action_shape)
    returns: Tensor  # (B,) discounted reward sum of the n-step window
    next_obs: Tensor  # (B, *obs_shape) the observation after the window
    discounts: Tensor  # (B,) gamma^steps, 0 after a termination
    weights: Tensor  # (B,) importance-sampling weights (ones when uniform)
    indices: Tensor  # (B,) int64 items, for update_priorities
    next_masks: Tensor | None = None  # (B, n) bool: the actions allowed at next_obs (masked envs)

    def part(self, start: int, stop: int) -> ReplayBatch:
        """Items start..stop-1 (views, no copy)."""
        return ReplayBatch(
            **{
                field.name: None if (value := getattr(self, field.name)) is None else value[start:stop]
                for field in fields(self)
            }
        )


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device | str,
        gamma: float,
        n_step: int = 1,
        prioritized: bool = False,
        alpha: float = 0.6,
    ):
        self.num_envs, self.gamma, self.n_step, self.alpha = num_envs, gamma, n_step, alpha
        self.rows = capacity // num_envs
        if self.rows < n_step + 1:
            raise ValueError(f"a replay buffer of {capacity} transitions holds too few steps of {num_envs} envs")

        def storage(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros((self.rows, num_envs, *shape), dtype=dtype, device=device)

        self.obs = storage(*obs_shape)
        self.next_obs = storage(*obs_shape)
        self.actions = storage(*action_shape, dtype=action_dtype)
        self.rewards = storage()
        self.terminated = storage(dtype=torch.bool)
        self.done = storage(dtype=torch.bool)
        self.next_masks: Tensor | None = None  # (rows, N, n) bool, made by the first add that has masks
        self.position = 0  # the row the next add writes
        self.rows_filled = 0
        self.tree = SumTree(self.rows * num_envs, device) if prioritized else None
        self.max_priority = 1.0
        self.initial: Tensor | None = None  # (rows, N) float64: actors' priorities of rows not yet complete
        self.env_index = torch.arange(num_envs, device=device)
        self.window = torch.arange(n_step, device=device)
        self.discount_powers = gamma ** torch.arange(n_step + 1, dtype=torch.float32, device=device)

    @classmethod
    def for_config(cls, config: Any, policy: Any, device: torch.device | str) -> ReplayBuffer:
        """The buffer a replay algorithm's keys describe, for its playing network's observations and
        actions (discrete: one int64 each; continuous: `action_size` float32 values)."""
        action_shape, dtype = ((), torch.int64) if policy.discrete else ((policy.action_size,), torch.float32)
        return cls(
            config.buffer_size,
            config.num_envs,
            tuple(policy.spec["obs_shape"]),
            action_shape,
            dtype,
            device,
            config.gamma,
            config.n_step,
            config.use_per,
            config.per_alpha,
        )

    @property
    def size(self) -> int:
        """Transitions stored."""
        return self.rows_filled * self.num_envs

    @property
    def sampleable_rows(self) -> int:
        return max(0, self.rows_filled - (self.n_step - 1))

    def can_sample(self, batch_size: int) -> bool:
        return self.sampleable_rows * self.num_envs >= batch_size

    def add(
        self,
        obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        next_obs: Tensor,
        terminated: Tensor,
        truncated: Tensor,
        next_masks: Tensor | None = None,
        priorities: Tensor | None = None,
    ) -> None:
        """One step of every env: (N, ...) tensors; next_obs is the step's `info["final_obs"]`,
        next_masks (an env that masks actions) the actions allowed there, (N, n) bool. Prioritised
        buffers: `priorities` (N,), the items' absolute TD errors as an actor computed them
        (trainer/algos/replay_feed.py), are their first priorities once their windows are complete;
        without them an item starts at the largest priority seen."""
        row = self.position
        if self.tree is not None and (priorities is not None or self.initial is not None):
            if self.initial is None:  # NaN: no priority given, the largest seen applies
                self.initial = torch.full((self.rows, self.num_envs), float("nan"), dtype=torch.float64)
                self.initial = self.initial.to(self.rewards.device)
            if priorities is None:
                self.initial[row] = float("nan")
            else:
                given = priorities.detach().abs().double() + PRIORITY_EPSILON
                self.initial[row] = given
                self.max_priority = max(self.max_priority, float(given.max()))
        if next_masks is not None:
            if self.next_masks is None:
                self.next_masks = torch.ones(
                    (self.rows, *next_masks.shape), dtype=torch.bool, device=self.rewards.device
                )
            self.next_masks[row] = next_masks
        self.obs[row] = obs
        self.actions[row] = actions
        self.rewards[row] = rewards
        self.next_obs[row] = next_obs
        self.terminated[row] = terminated
        self.done[row] = terminated | truncated
        self.position = (row + 1) % self.rows
        self.rows_filled = min(self.rows_filled + 1, self.rows)
        if self.tree is not None:
            priorities = self.tree.tree.new_zeros(self.num_envs)  # float64, on the tree's device
            self.tree.set(self._row_items(row), priorities)  # its window is not complete
            if self.rows_filled >= self.n_step:  # the row whose window this step completes
                complete = (row - (self.n_step - 1)) % self.rows
                priorities.fill_(self.max_priority)
                if self.initial is not None:
                    given = self.initial[complete]
                    priorities = torch.where(given.isnan(), priorities, given)
                self.tree.set(self._row_items(complete), priorities**self.alpha)

    def _row_items(self, row: int) -> Tensor:
        return row * self.num_envs + self.env_index

    def batches(
        self, count: int, batch_size: int, generator: torch.Generator, beta: float = 0.4
    ) -> Iterator[ReplayBatch]:
        """`count` minibatches, one per gradient step of an update. Uniform: all drawn and gathered
        at once (the buffer does not change during an update, so this is the same as drawing them
        one by one, with a fraction of the indexing operations). Prioritised: one at a time, each
        drawn after the previous step updated its priorities."""
        if self.tree is not None:
            for _ in range(count):
                yield self.sample(batch_size, generator, beta)
            return
        together = self.sample(count * batch_size, generator, beta)
        for step in range(count):
            yield together.part(step * batch_size, (step + 1) * batch_size)

    def sample(self, batch_size: int, generator: torch.Generator, beta: float = 0.4) -> ReplayBatch:
        device = self.obs.device
        if self.tree is None:
            oldest = (self.position - self.rows_filled) % self.rows
            rows = (
                oldest + torch.randint(self.sampleable_rows, (batch_size,), generator=generator, device=device)
            ) % self.rows
            envs = torch.randint(self.num_envs, (batch_size,), generator=generator, device=device)
            indices = rows * self.num_envs + envs
            weights = torch.ones(batch_size, device=device)
        else:
            total = self.tree.total
            # Stratified: one draw from each of batch_size equal slices of the total.
            slices = torch.arange(batch_size, device=device, dtype=torch.float64)
            slices += torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
            indices = self.tree.find(slices * (total / batch_size))
            probabilities = self.tree.get(indices) / total
            weights = (self.sampleable_rows * self.num_envs * probabilities) ** -beta
            weights = (weights / weights.max()).float()
            rows = indices // self.num_envs
        return self._windows(rows, indices, weights)

    def _items(self, field: Tensor, items: Tensor) -> Tensor:
        """field[row, env] for flat items row * num_envs + env, any shape of `items` (one index_select)."""
        flat = field.view(self.rows * self.num_envs, *field.shape[2:])
        return flat.index_select(0, items.reshape(-1)).view(*items.shape, *field.shape[2:])

    def _windows(self, rows: Tensor, indices: Tensor, weights: Tensor) -> ReplayBatch:
        """The n-step returns, last observations and discounts of the items (row, env)."""
        if self.n_step == 1:  # the window is the item itself
            last_items = indices
            returns = self._items(self.rewards, indices)
            discounts = self.discount_powers[1] * (~self._items(self.terminated, indices)).float()
        else:
            envs = indices - rows * self.num_envs
            window_rows = (rows.unsqueeze(1) + self.window) % self.rows  # (B, n)
            window_items = window_rows * self.num_envs + envs.unsqueeze(1)
            rewards = self._items(self.rewards, window_items)
            done = self._items(self.done, window_items).float()
            # Step k counts while no earlier step of the window ended the episode.
            alive = torch.cat((torch.ones_like(done[:, :1]), torch.cumprod(1.0 - done[:, :-1], 1)), 1)
            returns = (rewards * alive * self.discount_powers[: self.n_step]).sum(1)
            last = alive.sum(1).long() - 1
            last_items = window_items.gather(1, last.unsqueeze(1)).squeeze(1)
            ended = self._items(self.terminated, last_items)
            discounts = self.discount_powers[last + 1] * (~ended).float()
        return ReplayBatch(
            obs=self._items(self.obs, indices),
            actions=self._items(self.actions, indices),
            returns=returns,
            next_obs=self._items(self.next_obs, last_items),
            discounts=discounts,
            weights=weights,
            indices=indices,
            next_masks=None if self.next_masks is None else self._items(self.next_masks, last_items),
        )

    def update_priorities(self, indices: Tensor, errors: Tensor) -> None:
        """Prioritised buffers: the items' new priorities from their absolute TD errors."""
        if self.tree is None:
            return
        priorities = errors.detach().abs().double() + PRIORITY_EPSILON
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(indices, priorities**self.alpha)

    def state_dict(self) -> dict:
        state = {name: getattr(self, name) for name in ("obs", "next_obs", "actions", "rewards", "terminated", "done")}
        state.update(position=self.position, rows_filled=self.rows_filled, max_priority=self.max_priority)
        if self.tree is not None:
            state["tree"] = self.tree.state_dict()
        if self.next_masks is not None:
            state["next_masks"] = self.next_masks
        return state

    def load_state_dict(self, state: dict) -> None:
        for name in ("obs", "next_obs", "actions", "rewards", "terminated", "done"):
            saved = state[name]
            if tuple(saved.shape) != tuple(getattr(self, name).shape):
                raise ValueError(
                    f"the saved replay buffer's {name} has shape {tuple(saved.shape)}, this run's "
                    f"{tuple(getattr(self, name).shape)} (buffer_size or num_envs changed)"
                )
            getattr(self, name).copy_(saved)
        if state.get("next_masks") is not None:
            self.next_masks = state["next_masks"].to(self.rewards.device).clone()
        self.position, self.rows_filled = int(state["position"]), int(state["rows_filled"])
        self.max_priority = float(state["max_priority"])
        if self.tree is not None and "tree" in state:
            self.tree.load_state_dict(state["tree"])


def replay_state(buffer: ReplayBuffer, save: bool) -> dict:
    """The buffer's part of an algorithm's state_dict: all of it (`save_buffer`), or how much is lost."""
    if save:
        return {"replay": buffer.state_dict()}
    return {"replay": None, "replay_transitions_not_saved": buffer.size}


def restore_replay(buffer: ReplayBuffer, state: dict, log: Callable[[str], None]) -> None:
    """Take the buffer back from a checkpoint; one that was not saved is said in the run's log."""
    if state.get("replay") is not None:
        buffer.load_state_dict(state["replay"])
        return
    lost = int(state.get("replay_transitions_not_saved", 0))
    log(
        f"resumed without the replay buffer (save_buffer: false): the {lost:_} transitions it held are lost, "
        f"so the resume is not exact; it refills from new steps"
    )


def one_process_only(setup: Any) -> None:
    """A replay algorithm learns in one process from one buffer (the config refuses several
    processes when it is read; this catches an algorithm built by hand with a reduction)."""
    if setup.reduce_mean is not None:
        raise ValueError(
            f"algo {setup.config.algo} learns in one process: its replay buffer is not shared between ranks; "
            f"run it without nproc_per_node, or feed its one learner from several processes / machines "
            f"with actors (`python -m trainer master --config ... --actors N`, docs/cluster.md)"
        )


def per_beta_at(config: Any, progress: Any) -> float:
    """Prioritised replay's importance-sampling exponent: from `per_beta` linearly to 1 over the run."""
    return config.per_beta + (1.0 - config.per_beta) * min(1.0, progress.update / progress.num_updates)
