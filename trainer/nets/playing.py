"""What every user of a trained network calls: `PlayingNetwork`, the base of the networks that
play (`ActorCritic` of PPO / A2C, `QNetwork` of DQN, `SquashedGaussianActor` of SAC).

Checkpoints, `load_model`, evaluation, GIFs, the Watch tab, ONNX export and the policy server
hold a network of this kind, rebuilt from its spec by `trainer.nets.build.build_policy`, and call
only these:

    policy.normalize_obs(obs)                    raw env observations -> what the network takes
    policy.act(obs, generator, deterministic, action_mask=None)
                                                 (action, log pi(action|obs), value) on normalised obs
    policy.env_action(action)                    what the env is given (continuous: clipped to its bounds)
    policy.exported(obs, with_details, action_mask=None)
                                                 the ONNX graph's outputs: (action, *details)
    policy.export_names(with_details)            their names: ("action", ...)
    policy.spec, policy.discrete, policy.obs_normalizer
    policy.recurrent                             True: a state is carried from step to step
                                                 (`RecurrentActorCritic`, trainer/nets/recurrent.py)
    policy.play(obs, state, episode_start, deterministic, action_mask=None)
                                                 (action, state): `act` carrying a recurrent state

`action_mask` (discrete actions only): a bool tensor (batch, n), True where the action is allowed
(trainer/nets/masks.py); a forbidden action gets probability 0. None: every action is allowed.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.nets.masks import ActionMaskError, check_some_allowed
from trainer.nets.normalization import RunningMeanStd


class PlayingNetwork(nn.Module):
    """The common part: the spec, the observation normaliser and the action bounds."""

    detail_names: tuple[str, ...] = ()  # the ONNX outputs after "action" (with_details)
    recurrent: bool = False  # True: acts from a state carried between steps (trainer/nets/recurrent.py)

    def __init__(self, spec: dict):
        super().__init__()
        self.spec = spec
        action = spec["action"]
        self.discrete = action["kind"] == "discrete"
        self.action_size = action["n"] if self.discrete else action["dim"]
        self.obs_normalizer = RunningMeanStd(tuple(spec["obs_shape"])) if spec.get("norm_obs") else None
        if not self.discrete:
            self.register_buffer("action_low", torch.tensor(action["low"], dtype=torch.float32))
            self.register_buffer("action_high", torch.tensor(action["high"], dtype=torch.float32))

    def normalize_obs(self, obs: Tensor) -> Tensor:
        """Raw env observations -> what the networks take (identity unless `norm_obs`)."""
        if self.obs_normalizer is None:
            return obs
        return self.obs_normalizer.normalize(obs)

    def env_action(self, action: Tensor) -> Tensor:
        """What the env is given: continuous actions are clipped to the action bounds."""
        if self.discrete:
            return action
        return torch.maximum(torch.minimum(action, self.action_high), self.action_low)

    def act(
        self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(action, log pi(action|obs), value estimate) for a batch of normalised observations;
        `action_mask` (keyword, discrete only): the allowed actions of each, as the module says."""
        raise NotImplementedError

    def play(
        self,
        obs: Tensor,
        state: Tensor | None = None,
        episode_start: Tensor | None = None,
        deterministic: bool = True,
        action_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """(action, state) for a player that steps envs episode after episode (evaluation, GIFs):
        a recurrent network continues from `state` (None: a new episode), zeroed where
        `episode_start`; any other returns `state` as given. Normalised observations, as `act`."""
        return self.act(obs, deterministic=deterministic, action_mask=action_mask)[0], state

    def exported(self, obs: Tensor, with_details: bool = False) -> tuple[Tensor, ...]:
        """The greedy action for normalised observations, then `detail_names`' tensors when asked;
        `action_mask` (discrete only) as in `act`."""
        raise NotImplementedError

    def check_action_mask(self, action_mask: Tensor | None, rows: bool = True) -> None:
        """ActionMaskError for a mask given to a continuous policy, or (`rows`: one host sync, which
        `act` pays and the ONNX graph does not) for a row that allows no action."""
        if action_mask is None:
            return
        if not self.discrete:
            raise ActionMaskError("action masks are for discrete action spaces; this policy's actions are continuous")
        if rows:
            check_some_allowed(action_mask)

    def export_names(self, with_details: bool) -> list[str]:
        return ["action", *self.detail_names] if with_details else ["action"]
