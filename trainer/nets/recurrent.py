"""`RecurrentActorCritic`: the policy of `model_type: ppo-lstm`, an LSTM core between the
observation and the actor and critic heads. As sb3-contrib's RecurrentPPO (by default), the actor
and the critic each have their own encoder and LSTM, so the critic's large value errors do not
drown the actor's gradient in a shared core:

    obs -> Linear(obs, 64) + tanh -> LSTM(64) -> actor head (logits or Gaussian mean)
    obs -> Linear(obs, 64) + tanh -> LSTM(64) -> critic head V

The two run as one LSTM of 2 x 64 whose weights are block-diagonal (the blocks that would mix
them are held at zero by a fixed mask), so a step costs the ops of one LSTM. The state is one
tensor (2, B, 128): h and c of every env (the actor's 64, then the critic's). `episode_start`
(B,) zeroes an env's state before its step, so a new episode never sees the last one's memory.
The LSTM is written out (the input projection of all steps at once, then ~8 ops per step), so
that the rollout (one step at a time), the update (whole sequences with resets inside) and the
ONNX graph (one step, the state as explicit inputs and outputs) run the same function; gates in
`nn.LSTM`'s order (i, f, g, o), each 2 x 64 wide.

`predict` answers as sb3-contrib's RecurrentPPO.predict does: (action, (h, c)) with h and c numpy
arrays of shape (1, B, 128) (the API's `Model.predict` and the policy server call it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from trainer.nets.masks import as_mask, mask_logits
from trainer.nets.policies import PolicyDistribution
from trainer.nets.spec import LSTM_SIZE
from trainer.nets.torso import layer, obs_size


class RecurrentActorCritic(PolicyDistribution):
    """pi(a | history) and V(history) through an LSTM; methods take *normalised* observations."""

    recurrent = True

    def __init__(self, spec: dict):
        super().__init__(spec)
        size = int(spec.get("lstm_size", LSTM_SIZE))  # each of the actor's and the critic's
        self.core_size = size
        self.state_size = 2 * size
        self.encoder = nn.Sequential(nn.Flatten(), layer(obs_size(spec), 2 * size, math.sqrt(2)), nn.Tanh())
        self.weight_ih = nn.Parameter(torch.zeros(8 * size, 2 * size))
        self.weight_hh = nn.Parameter(torch.zeros(8 * size, 2 * size))
        self.bias = nn.Parameter(torch.zeros(8 * size))
        # (8 size, 2 size): gate rows of the actor (the first `size` of each gate) read its columns only
        rows = torch.arange(8 * size) % (2 * size) < size
        columns = torch.arange(2 * size) < size
        self.register_buffer("block_mask", (rows[:, None] == columns[None, :]).float(), persistent=False)
        with torch.no_grad():
            for weight in (self.weight_ih, self.weight_hh):
                for gate in range(4):
                    for block in range(2):
                        rows_of = slice(gate * 2 * size + block * size, gate * 2 * size + (block + 1) * size)
                        columns_of = slice(block * size, (block + 1) * size)
                        nn.init.orthogonal_(weight[rows_of, columns_of], 1.0)
        self.actor = layer(size, self.action_size, 0.01)
        self.critic = layer(size, 1, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(self.action_size))

    @property
    def detail_names(self) -> tuple[str, ...]:
        return ("probs" if self.discrete else "mean", "value")

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> Tensor:
        """(2, batch, size) zeros: h and c at the start of an episode."""
        return torch.zeros((2, batch, self.state_size), device=device)

    # -- the core ------------------------------------------------------------------------------

    def sequence(self, obs: Tensor, state: Tensor, starts: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The LSTM over (T, B, *obs_shape) observations from `state` (2, B, size); `starts`
        (T, B) 1.0 where an episode starts with that step (its state is zeroed first).
        Returns (outputs (T, B, size), the state after the last step)."""
        steps, batch, size = obs.shape[0], obs.shape[1], self.state_size
        inputs = self.encoder(obs.reshape(steps * batch, *obs.shape[2:]))
        projected = torch.addmm(self.bias, inputs, (self.weight_ih * self.block_mask).T).view(steps, batch, -1)
        recurrent_weight = (self.weight_hh * self.block_mask).T
        hidden, cell = state[0], state[1]
        keep = None if starts is None else (1.0 - starts).unsqueeze(-1)
        outputs = []
        for t in range(steps):  # gates i, f, g, o (nn.LSTM's order)
            if keep is not None:
                hidden, cell = hidden * keep[t], cell * keep[t]
            gates = torch.addmm(projected[t], hidden, recurrent_weight)
            squashed = gates.sigmoid()  # g's slice is not used: one op for i, f and o
            cell = torch.addcmul(
                squashed[:, size : 2 * size] * cell, squashed[:, :size], gates[:, 2 * size : 3 * size].tanh()
            )
            hidden = squashed[:, 3 * size :] * cell.tanh()
            outputs.append(hidden)
        return torch.stack(outputs), torch.stack((hidden, cell))

    def step(self, obs: Tensor, state: Tensor, episode_start: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """One step of B envs: (actor head, V, the new state)."""
        starts = None if episode_start is None else episode_start.to(obs.dtype)[None]
        outputs, state = self.sequence(obs.unsqueeze(0), state, starts)
        size = self.core_size
        return self.actor(outputs[0, :, :size]), self.critic(outputs[0, :, size:]).squeeze(-1), state

    # -- what PlayingNetwork declares -------------------------------------------------------------

    def act(
        self,
        obs: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        action_mask: Tensor | None = None,
        state: Tensor | None = None,
        episode_start: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(action, log pi, V) of one step from `state` (None: the start of an episode); the new
        state is `self.last_state` (a playing network's act returns three values everywhere)."""
        self.check_action_mask(action_mask)
        if state is None:
            state = self.initial_state(obs.shape[0], obs.device)
        head, value, self.last_state = self.step(obs, state, episode_start)
        if action_mask is not None:
            head = mask_logits(head, action_mask)
        return self.choose(head, value, generator, deterministic, action_mask)

    def play(
        self,
        obs: Tensor,
        state: Tensor | None = None,
        episode_start: Tensor | None = None,
        deterministic: bool = True,
        action_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        action, _, _ = self.act(
            obs, deterministic=deterministic, action_mask=action_mask, state=state, episode_start=episode_start
        )
        return action, self.last_state

    def exported(
        self,
        obs: Tensor,
        state_h: Tensor,
        state_c: Tensor,
        with_details: bool = False,
        action_mask: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        """The ONNX graph: the greedy action and the new state (h, c), each (1, B, size)."""
        self.check_action_mask(action_mask, rows=False)
        head, value, state = self.step(obs, torch.cat((state_h, state_c)))
        if action_mask is not None:
            head = mask_logits(head, action_mask)
        action = head.argmax(-1) if self.discrete else self.env_action(head)
        outputs = (action, state[0:1], state[1:2])
        if not with_details:
            return outputs
        return (*outputs, head.softmax(-1) if self.discrete else head, value)

    def export_names(self, with_details: bool) -> list[str]:
        return ["action", "state_h_out", "state_c_out", *(self.detail_names if with_details else ())]

    def value(self, obs: Tensor, state: Tensor) -> Tensor:
        return self.step(obs, state)[1]

    def evaluate(
        self, obs: Tensor, actions: Tensor, state: Tensor, starts: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """For the update, over whole sequences (T, B): (log pi(action), entropy, V), each (T * B)."""
        outputs, _ = self.sequence(obs, state, starts)
        outputs = outputs.flatten(0, 1)
        head = self.actor(outputs[:, : self.core_size])
        if action_mask is not None:
            head = mask_logits(head, action_mask.flatten(0, 1))
        log_prob, entropy = self._log_prob_and_entropy(head, actions.flatten(0, 1))
        return log_prob, entropy, self.critic(outputs[:, self.core_size :]).squeeze(-1)

    # -- predict, as sb3-contrib's RecurrentPPO --------------------------------------------------

    @torch.no_grad()
    def predict(
        self,
        obs: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
        action_masks: Any = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """(actions, (h, c)) for one raw observation or a batch (B, *obs_shape) (array, list or
        tensor), as numpy. state: None (every env starts an episode) or the (h, c) returned last,
        each (1, B, size); episode_start: None or B booleans, True where an env starts a new one
        (its state is zeroed first); action_masks: bools (n,) or (B, n), True where allowed."""
        device = next(self.parameters()).device
        shape = tuple(self.spec["obs_shape"])
        batch_obs = torch.as_tensor(np.asarray(obs.cpu() if isinstance(obs, Tensor) else obs), dtype=torch.float32)
        single = tuple(batch_obs.shape) == shape
        if single:
            batch_obs = batch_obs.unsqueeze(0)
        elif tuple(batch_obs.shape[1:]) != shape:
            raise ValueError(
                f"expected observations of shape {shape} (or a batch (N, {', '.join(map(str, shape))})), "
                f"got {tuple(batch_obs.shape)}"
            )
        batch = batch_obs.shape[0]
        starts = None
        if episode_start is not None:
            starts = torch.as_tensor(np.asarray(episode_start, dtype=np.float32).reshape(-1), device=device)
            if starts.numel() != batch:
                raise ValueError(f"episode_start must hold {batch} values (one per observation), got {starts.numel()}")
        mask = None
        if action_masks is not None:
            self.check_action_mask(action_masks, rows=False)  # continuous: refused, clearly
            mask = as_mask(action_masks, batch, self.action_size, device)
        action, _, _ = self.act(
            self.normalize_obs(batch_obs.to(device)),
            deterministic=deterministic,
            action_mask=mask,
            state=self.state_tensor(state, batch, device),
            episode_start=starts,
        )
        action = self.env_action(action).cpu().numpy()
        new_state = self.last_state.cpu().numpy()
        return (action[0] if single else action), (new_state[0:1], new_state[1:2])

    def state_tensor(self, state: Any, batch: int, device: torch.device | str) -> Tensor:
        """A given state as the (2, batch, size) tensor; ValueError naming the shapes it takes."""
        if state is None:
            return self.initial_state(batch, device)
        expected = f"(h, c), each of shape (1, {batch}, {self.state_size}) as predict returned it"
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError(f"state must be None or {expected}")
        parts = [torch.as_tensor(np.asarray(part, dtype=np.float32), device=device) for part in state]
        if any(tuple(part.shape) != (1, batch, self.state_size) for part in parts):
            raise ValueError(f"state must be {expected}; got shapes {[tuple(part.shape) for part in parts]}")
        return torch.cat(parts)
