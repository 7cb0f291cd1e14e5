"""DQN's network, `QNetwork`: Q(s, a) for every discrete action, the greedy policy that plays.

    Q(s, .) = head(body(s))                                      (plain)
    Q(s, .) = V(s) + A(s, .) - mean_a A(s, a)                    (dueling: Wang et al. 2016)

`body` is the MLP (ReLU) or the convolutional torso a spec's `model_type` names
(trainer/nets/torso.py); the spec's `dueling` adds the two-stream head. Acting is greedy: the
epsilon of exploration is the algorithm's (trainer/algos/dqn.py), not the network's. With an
action mask, the greedy action is the best allowed one (trainer/nets/masks.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.nets.masks import masked_argmax
from trainer.nets.playing import PlayingNetwork
from trainer.nets.spec import ModelError
from trainer.nets.torso import body, layer


class QNetwork(PlayingNetwork):
    detail_names = ("q_values",)

    def __init__(self, spec: dict):
        super().__init__(spec)
        if not self.discrete:
            raise ModelError("a Q-network needs discrete actions; for continuous actions use algo sac (or ppo)")
        self.body, features = body(spec, nn.ReLU)
        self.dueling = bool(spec.get("dueling"))
        self.head = layer(features, self.action_size, 1.0)
        self.value_head = layer(features, 1, 1.0) if self.dueling else None

    def forward(self, obs: Tensor) -> Tensor:
        """Q(s, a) for every action: (N, actions), from normalised observations."""
        features = self.body(obs)
        q = self.head(features)
        if self.value_head is not None:
            q = self.value_head(features) + q - q.mean(-1, keepdim=True)
        return q

    def greedy(self, q: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """argmax_a Q(s, a), over the allowed actions when `action_mask` is given."""
        return q.argmax(-1) if action_mask is None else masked_argmax(q, action_mask)

    def act(
        self,
        obs: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        action_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The greedy (allowed) action (log-probability 0: the policy is deterministic) and its Q-value."""
        self.check_action_mask(action_mask)
        q = self(obs)
        action = self.greedy(q, action_mask)
        value = q.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return action, torch.zeros_like(value), value

    def exported(
        self, obs: Tensor, with_details: bool = False, action_mask: Tensor | None = None
    ) -> tuple[Tensor, ...]:
        """The greedy allowed action, and with details Q(s, .) of every action (forbidden ones too)."""
        self.check_action_mask(action_mask, rows=False)
        q = self(obs)
        action = self.greedy(q, action_mask)
        return (action, q) if with_details else (action,)
