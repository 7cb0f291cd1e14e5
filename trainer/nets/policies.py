"""The policy / value networks (`ActorCritic`), built from a spec (trainer/nets/spec.py).

Discrete action spaces get a categorical head (logits); continuous ones a Gaussian head with a
state-independent log standard deviation. Weights use orthogonal initialisation as in the PPO
literature: gain sqrt(2) for hidden layers, 0.01 for the policy output (a near-uniform first
policy), 1 for the value output. The forward pass is the modules'; the no-grad forms derived
from them live in trainer/nets/fast_forward.py.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from trainer.nets.activations import Tanh
from trainer.nets.fast_forward import ActionSampler, RolloutScorer
from trainer.nets.normalization import RunningMeanStd
from trainer.nets.spec import CNN_FEATURES, MLP_HIDDEN_SIZES, ModelError

LOG_2PI = math.log(2 * math.pi)


def build_policy(spec: dict) -> ActorCritic:
    """The network a spec describes, new weights (a checkpoint then loads its own into it)."""
    return ActorCritic(spec)


def _layer(in_features: int, out_features: int, gain: float) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(in_features: int, hidden: tuple[int, ...], out_features: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [_layer(in_features, size, math.sqrt(2)), Tanh()]
        in_features = size
    layers.append(_layer(in_features, out_features, out_gain))
    return nn.Sequential(*layers)


class ConvTorso(nn.Module):
    """Convolutions for (C, H, W), (H, W, C) or (H, W) observations -> CNN_FEATURES features.

    Large images (>= 36 px a side) get the Nature-DQN stack (8x8/4, 4x4/2, 3x3/1); small grids
    such as Snake's board get 3x3 convolutions that keep every cell visible.
    """

    def __init__(self, obs_shape: list[int], obs_scale: float):
        super().__init__()
        self.obs_scale = obs_scale
        if len(obs_shape) == 2:
            self.layout, channels, height, width = "hw", 1, obs_shape[0], obs_shape[1]
        elif obs_shape[-1] <= 4 < obs_shape[0]:
            self.layout, (height, width, channels) = "hwc", obs_shape
        else:
            self.layout, (channels, height, width) = "chw", obs_shape
        gain = math.sqrt(2)
        if min(height, width) >= 36:
            convs = [
                nn.Conv2d(channels, 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
            ]
        else:
            convs = [
                nn.Conv2d(channels, 32, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, 64, 3, stride=2 if min(height, width) > 8 else 1, padding=1),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, padding=1),
                nn.ReLU(),
            ]
        for module in convs:
            if isinstance(module, nn.Conv2d):
                nn.init.orthogonal_(module.weight, gain)
                nn.init.zeros_(module.bias)
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat_size = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(_layer(flat_size, CNN_FEATURES, gain), nn.ReLU())

    def forward(self, obs: Tensor) -> Tensor:
        if self.layout == "hw":
            obs = obs.unsqueeze(1)
        elif self.layout == "hwc":
            obs = obs.permute(0, 3, 1, 2)
        if self.obs_scale != 1.0:
            obs = obs * self.obs_scale
        return self.linear(self.convs(obs))


class ActorCritic(nn.Module):
    """pi(a|s) and V(s). The methods take *normalised* observations (see `normalize_obs`),
    because the trainer stores observations as the policy saw them during the rollout."""

    def __init__(self, spec: dict):
        super().__init__()
        self.spec = spec
        model_type = spec["model_type"]
        obs_shape = list(spec["obs_shape"])
        action = spec["action"]
        self.discrete = action["kind"] == "discrete"
        action_outputs = action["n"] if self.discrete else action["dim"]
        self.obs_normalizer = RunningMeanStd(tuple(obs_shape)) if spec.get("norm_obs") else None
        if model_type == "ppo-cnn":
            self.torso: nn.Module | None = ConvTorso(obs_shape, spec.get("obs_scale", 1.0))
            self.actor = _layer(CNN_FEATURES, action_outputs, 0.01)
            self.critic = _layer(CNN_FEATURES, 1, 1.0)
        else:
            if model_type not in MLP_HIDDEN_SIZES:
                raise ModelError(f"unknown model_type {model_type!r}; known: {', '.join(MLP_HIDDEN_SIZES)}, ppo-cnn")
            self.torso = None
            obs_size = int(np.prod(obs_shape))
            hidden = tuple(spec.get("hidden_sizes") or MLP_HIDDEN_SIZES[model_type])
            self.actor = _mlp(obs_size, hidden, action_outputs, 0.01)
            self.critic = _mlp(obs_size, hidden, 1, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(action_outputs))
            self.register_buffer("action_low", torch.tensor(action["low"], dtype=torch.float32))
            self.register_buffer("action_high", torch.tensor(action["high"], dtype=torch.float32))

    # -- observations --------------------------------------------------------------------------

    def normalize_obs(self, obs: Tensor) -> Tensor:
        """Raw env observations -> what the networks take (identity unless `norm_obs`)."""
        if self.obs_normalizer is None:
            return obs
        return self.obs_normalizer.normalize(obs)

    def _features(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs of the actor and of the critic."""
        if self.torso is not None:
            shared = self.torso(obs)
            return shared, shared
        flat = obs.reshape(obs.shape[0], -1)
        return flat, flat

    # -- pi and V ------------------------------------------------------------------------------

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(self._features(obs)[1]).squeeze(-1)

    def act(
        self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Sample actions: (action, log pi(action|obs), V(obs))."""
        actor_input, critic_input = self._features(obs)
        head = self.actor(actor_input)
        value = self.critic(critic_input).squeeze(-1)
        if deterministic:
            action = head.argmax(-1) if self.discrete else head
        else:
            noise = self.action_noise(1, head.shape[0], generator, head.device)[0]
            action = self.noisy_action(head.clone(), noise, self.log_std.exp() if not self.discrete else None)
        return action, self._log_prob(head, action), value

    def action_noise(
        self, steps: int, batch: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
    ) -> Tensor:
        """(steps, batch, head size) randomness for `steps` batches of actions: Gumbel noise for
        a categorical head, standard normal noise for a Gaussian one (see `noisy_action`)."""
        action = self.spec["action"]
        shape = (steps, batch, action["n"] if self.discrete else action["dim"])
        if self.discrete:  # Gumbel(0, 1) = -log(-log(U)), U uniform in [0, 1)
            return torch.rand(shape, generator=generator, device=device).log_().neg_().log_().neg_()
        return torch.randn(shape, generator=generator, device=device)

    def noisy_action(self, head: Tensor, noise: Tensor, std: Tensor | None) -> Tensor:
        """A sample of the policy, computed in place on `head`: argmax(logits + Gumbel noise) is a
        sample of softmax(logits) (the Gumbel-max trick); mean + std * noise one of the Gaussian."""
        if self.discrete:
            return head.add_(noise).argmax(-1)
        return head.addcmul_(noise, std)

    def sampler(self) -> ActionSampler:
        """A fast no-grad actor for the rollout (a snapshot of the current weights)."""
        return ActionSampler(self)

    def scorer(self) -> RolloutScorer:
        """pi(a|s) and V(s) without gradients, from a snapshot of the current weights."""
        return RolloutScorer(self)

    def score(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """(log pi(action|obs), V(obs)) without gradients: the rollout's pi_old and V_old."""
        return self.scorer()(obs, action)

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """For the update: (log pi(action|obs), entropy of pi(.|obs), V(obs))."""
        actor_input, critic_input = self._features(obs)
        head = self.actor(actor_input)
        value = self.critic(critic_input).squeeze(-1)
        if self.discrete:
            log_probs = head.log_softmax(-1)
            log_prob = log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            return log_prob, entropy, value
        entropy = (0.5 + 0.5 * LOG_2PI + self.log_std).sum().expand(head.shape[0])
        return self._gaussian_log_prob(head, action), entropy, value

    def _log_prob(self, head: Tensor, action: Tensor) -> Tensor:
        if self.discrete:
            return head.log_softmax(-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        return self._gaussian_log_prob(head, action)

    def _gaussian_log_prob(self, mean: Tensor, action: Tensor) -> Tensor:
        log_std = self.log_std
        return (-0.5 * ((action - mean) / log_std.exp()).square() - log_std - 0.5 * LOG_2PI).sum(-1)

    def env_action(self, action: Tensor) -> Tensor:
        """What the env is given: continuous actions are clipped to the action bounds
        (the unclipped sample is what the update scores)."""
        if self.discrete:
            return action
        return torch.maximum(torch.minimum(action, self.action_high), self.action_low)
