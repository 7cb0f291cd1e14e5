"""SAC's networks: `SquashedGaussianActor`, the policy that plays, and `TwinQ`, the critic pair.

The actor outputs the mean and log standard deviation of a Gaussian u ~ N(mu(s), sigma(s)); the
action is a = tanh(u), scaled to the env's bounds. Its log-probability carries the change of
variables of the tanh (Haarnoja et al. 2018, appendix C):

    log pi(a|s) = log N(u; mu, sigma) - sum_i log(1 - tanh(u_i)^2)
                = log N(u; mu, sigma) - sum_i 2 (log 2 - u_i - softplus(-2 u_i))   (the stable form)

Playing deterministically takes tanh(mu(s)). `TwinQ` holds Q1 and Q2 (s, a) -> value, MLPs on
the flat observation and the action in [-1, 1], evaluated together as one ensemble
(trainer/nets/ensemble.py); the critic lives in the algorithm's state, not in the model file.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.nets.ensemble import EnsembleMLP, stack_separate_mlps
from trainer.nets.playing import PlayingNetwork
from trainer.nets.spec import ModelError
from trainer.nets.torso import body, hidden_sizes, obs_size

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's bounds on log sigma
LOG_2PI = math.log(2 * math.pi)
LOG_2 = math.log(2.0)


def squashed_log_prob(u: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log pi(tanh(u)) for u ~ N(mean, exp(log_std)), summed over action dimensions."""
    gaussian = -0.5 * ((u - mean) / log_std.exp()).square() - log_std - 0.5 * LOG_2PI
    correction = 2.0 * (LOG_2 - u - F.softplus(-2.0 * u))  # log(1 - tanh(u)^2)
    return (gaussian - correction).sum(-1)


class SquashedGaussianActor(PlayingNetwork):
    detail_names = ("mean",)

    def __init__(self, spec: dict):
        super().__init__(spec)
        if self.discrete:
            raise ModelError(
                f"algo sac needs continuous actions (a Box), but this env's actions are discrete "
                f"({self.action_size} choices); use algo dqn or ppo for it"
            )
        if not all(math.isfinite(bound) for bound in (*spec["action"]["low"], *spec["action"]["high"])):
            raise ModelError(
                f"algo sac squashes its actions into the env's bounds, but they are not finite (low "
                f"{spec['action']['low']}, high {spec['action']['high']}); give the env finite action bounds "
                f"(a wrapper in `wrappers`, e.g. one built on gymnasium.wrappers.RescaleAction), or use algo ppo"
            )
        self.body, features = body(spec, nn.ReLU)
        self.mean = nn.Linear(features, self.action_size)
        self.log_std = nn.Linear(features, self.action_size)
        self.register_buffer("action_scale", (self.action_high - self.action_low) / 2.0)
        self.register_buffer("action_bias", (self.action_high + self.action_low) / 2.0)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """mu(s) and log sigma(s) (bounded to [LOG_STD_MIN, LOG_STD_MAX] by a tanh)."""
        features = self.body(obs)
        log_std = torch.tanh(self.log_std(features))
        return self.mean(features), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """A reparameterised sample in [-1, 1] and its log-probability (gradients flow through both)."""
        mean, log_std = self(obs)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * noise
        return torch.tanh(u), squashed_log_prob(u, mean, log_std)

    def to_env_scale(self, squashed: Tensor) -> Tensor:
        """[-1, 1] -> the env's bounds."""
        return squashed * self.action_scale + self.action_bias

    def act(
        self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False, action_mask=None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """An action in the env's bounds and its log-probability (0 when deterministic); no value."""
        self.check_action_mask(action_mask)  # continuous: a mask is refused
        if deterministic:
            mean, _ = self(obs)
            action = self.to_env_scale(torch.tanh(mean))
            return action, torch.zeros(action.shape[0], device=action.device), torch.zeros_like(action[:, 0])
        squashed, log_prob = self.sample(obs, generator)
        return self.to_env_scale(squashed), log_prob, torch.zeros_like(log_prob)

    def exported(self, obs: Tensor, with_details: bool = False) -> tuple[Tensor, ...]:
        mean, _ = self(obs)
        action = self.to_env_scale(torch.tanh(mean))
        return (action, mean) if with_details else (action,)


class TwinQ(nn.Module):
    """Q1(s, a) and Q2(s, a) for actions in [-1, 1], two MLPs (ReLU) on [flat s, a], evaluated as
    one `EnsembleMLP` (one batched matmul per layer for both)."""

    def __init__(self, spec: dict):
        super().__init__()
        if spec["model_type"] == "ppo-cnn":
            raise ModelError("SAC here takes vector observations (an MLP model_type), not ppo-cnn")
        inputs = obs_size(spec) + spec["action"]["dim"]
        self.q = EnsembleMLP(2, inputs, hidden_sizes(spec), 1, 1.0, nn.ReLU)
        # Checkpoints of the two separate MLPs (`q1`, `q2`) still load.
        self._register_load_state_dict_pre_hook(_from_separate_critics)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """(2, B): row k is Qk(s, a), so that `q1, q2 = critic(obs, action)`."""
        joined = torch.cat((obs.reshape(obs.shape[0], -1), action), -1)
        return self.q(joined).squeeze(-1)

    def values_and_inputs(self, obs: Tensor, action: Tensor) -> tuple[Tensor, list[Tensor]]:
        """`forward` without autograd, and what `write_gradient` needs."""
        q, inputs = self.q.forward_with_inputs(torch.cat((obs.reshape(obs.shape[0], -1), action), -1))
        return q.squeeze(-1), inputs

    def write_gradient(self, inputs: list[Tensor], grad_values: Tensor) -> None:
        """dL/d(parameters) into their `.grad` from dL/dQ, (2, B)."""
        self.q.write_gradient(inputs, grad_values.unsqueeze(-1))


def _from_separate_critics(state: dict, prefix: str, *_) -> None:
    stack_separate_mlps(state, prefix, ["q1", "q2"], "q")
