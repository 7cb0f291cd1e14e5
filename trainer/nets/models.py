"""Policy / value networks, chosen by `model_type`.

    ppo-small   actor and critic MLPs, 64 x 64, tanh
    ppo-medium  actor and critic MLPs, 256 x 256, tanh
    ppo-large   actor and critic MLPs, 512 x 512 x 256, tanh
    ppo-cnn     a shared convolutional torso (ReLU) for image or grid observations, then
                one linear head for the actor and one for the critic

Discrete action spaces get a categorical head (logits); continuous ones a Gaussian head with a
state-independent log standard deviation. Weights use orthogonal initialisation as in the PPO
literature: gain sqrt(2) for hidden layers, 0.01 for the policy output (a near-uniform first
policy), 1 for the value output.

A network is described by a `spec`, a plain dict (saved in every checkpoint), so that
`build_policy(spec)` rebuilds it without unpickling any Python object.

The forward pass is the modules' (`nn.Sequential` of `nn.Linear` and activations). The fast
no-grad forms (`FoldedMLP` for the rollout, the written-out gradient in trainer/algos/ppo_fast.py)
are derived from those modules layer by layer (`mlp_layers`), with each activation's forms
taken from one table (`ACTIVATIONS`); tests/test_trainer_ppo.py holds them to the modules.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from trainer.nets.normalization import RunningMeanStd

MLP_HIDDEN_SIZES = {"ppo-small": (64, 64), "ppo-medium": (256, 256), "ppo-large": (512, 512, 256)}
CNN_FEATURES = 512
LOG_2PI = math.log(2 * math.pi)


class ModelError(ValueError):
    """The model type does not fit the environment's observations or actions."""


def make_policy_spec(model_type: str, observation_space, action_space, norm_obs: bool = False) -> dict:
    """Describe the network for these Gymnasium spaces as a plain dict."""
    obs_shape = [int(size) for size in observation_space.shape]
    high = np.asarray(getattr(observation_space, "high", np.inf), dtype=np.float64)
    # Images arrive as 0..255 floats: scale them to 0..1 inside the network.
    obs_scale = 1.0 / 255.0 if model_type == "ppo-cnn" and np.all(np.isfinite(high)) and high.max() == 255 else 1.0
    kind = type(action_space).__name__
    if kind == "Discrete":
        action = {"kind": "discrete", "n": int(action_space.n)}
    elif kind == "Box":
        if len(action_space.shape) != 1:
            raise ModelError(f"continuous actions must be a flat vector, got shape {action_space.shape}")
        action = {
            "kind": "continuous",
            "dim": int(action_space.shape[0]),
            "low": [float(x) for x in np.asarray(action_space.low).reshape(-1)],
            "high": [float(x) for x in np.asarray(action_space.high).reshape(-1)],
        }
    else:
        raise ModelError(f"action space {action_space} is not supported: use Discrete or a 1-D Box")
    if model_type == "ppo-cnn" and len(obs_shape) not in (2, 3):
        raise ModelError(
            f"model_type ppo-cnn needs image or grid observations (2 or 3 dimensions), but this env "
            f"observes a vector of shape {tuple(obs_shape)}; use ppo-small, ppo-medium or ppo-large")
    return {"model_type": model_type, "obs_shape": obs_shape, "obs_scale": obs_scale,
            "action": action, "norm_obs": bool(norm_obs)}


def build_policy(spec: dict) -> "ActorCritic":
    return ActorCritic(spec)


def _layer(in_features: int, out_features: int, gain: float) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


@dataclass(frozen=True)
class Activation:
    """An elementwise activation written as f(z) = scale * kernel(gain * z) + shift, where
    `kernel` is a cheap in-place torch op. Every no-grad form of an MLP (`FoldedMLP`, the
    written-out gradient) is derived from these numbers, so adding an activation is one entry
    in `ACTIVATIONS`."""

    kernel: Callable[[Tensor], Tensor]                # in place
    gain: float
    scale: float
    shift: float
    backward: Callable[[Tensor, Tensor], Tensor]      # (dL/dy, y = f(z)) -> dL/dz

    def fast(self, z: Tensor) -> Tensor:
        """f(z) in a new tensor (the input is left alone)."""
        y = self.kernel(z.mul(self.gain) if self.gain != 1.0 else z.clone())
        return self._scale_shift_(y)

    def after_linear(self, linear: nn.Linear, x: Tensor) -> Tensor:
        """f(x W^T + b), with the gain folded into the matmul (one op fewer)."""
        z = torch.addmm(linear.bias, x, linear.weight.t(), beta=self.gain, alpha=self.gain)
        return self._scale_shift_(self.kernel(z))

    def _scale_shift_(self, y: Tensor) -> Tensor:
        if self.scale != 1.0:
            y.mul_(self.scale)
        if self.shift != 0.0:
            y.add_(self.shift)
        return y


def _tanh_backward(grad: Tensor, output: Tensor) -> Tensor:
    return torch.addcmul(grad, grad * output, output, value=-1.0)     # g (1 - tanh^2)


def _relu_backward(grad: Tensor, output: Tensor) -> Tensor:
    return grad * (output > 0)


# tanh(z) = 2 sigmoid(2z) - 1: PyTorch's exact CPU tanh kernel is several times slower than its
# sigmoid, and the two agree to 2e-7.
ACTIVATIONS: dict[type[nn.Module], Activation] = {
    nn.Tanh: Activation(Tensor.sigmoid_, gain=2.0, scale=2.0, shift=-1.0, backward=_tanh_backward),
    nn.ReLU: Activation(Tensor.relu_, gain=1.0, scale=1.0, shift=0.0, backward=_relu_backward),
}


class UnsupportedNetwork(ModelError):
    """A network with a layer that has no derived no-grad form (the caller falls back to the module)."""


def activation_of(module: nn.Module) -> Activation | None:
    """The table entry for an activation module (subclasses included), None if it has none."""
    for cls in type(module).__mro__:
        if cls in ACTIVATIONS:
            return ACTIVATIONS[cls]
    return None


def mlp_layers(mlp: nn.Module) -> list[tuple[nn.Linear, Activation | None]]:
    """An MLP as (Linear, its activation or None) pairs, the last one without activation.

    Raises UnsupportedNetwork, naming the layer, for anything else (a layer type or activation
    without an entry in ACTIVATIONS, two activations in a row, a Linear without bias)."""
    modules = list(mlp) if isinstance(mlp, nn.Sequential) else [mlp]
    supported = ", ".join(cls.__name__ for cls in ACTIVATIONS)
    layers: list[tuple[nn.Linear, Activation | None]] = []
    for index, module in enumerate(modules):
        if isinstance(module, nn.Linear) and module.bias is not None:
            if layers and layers[-1][1] is None:
                raise UnsupportedNetwork(f"layer {index} ({module}) follows a Linear without an activation")
            layers.append((module, None))
            continue
        activation = activation_of(module)
        if activation is None or not layers or layers[-1][1] is not None:
            raise UnsupportedNetwork(f"layer {index} ({module}) has no derived form: expected Linear (with bias) "
                                     f"layers, each followed by one of {supported}")
        layers[-1] = (layers[-1][0], activation)
    if not layers or layers[-1][1] is not None:
        raise UnsupportedNetwork("the network must end with a Linear layer (the head)")
    return layers


class Tanh(nn.Tanh):
    """tanh; without autograd on the CPU (the rollout, `predict`) in its fast form from
    `ACTIVATIONS` (2 sigmoid(2x) - 1), since PyTorch's exact CPU tanh is several times slower."""

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu" or (torch.is_grad_enabled() and x.requires_grad):
            return torch.tanh(x)
        return ACTIVATIONS[nn.Tanh].fast(x)


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
            convs = [nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                     nn.Conv2d(64, 64, 3, stride=1), nn.ReLU()]
        else:
            convs = [nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(),
                     nn.Conv2d(32, 64, 3, stride=2 if min(height, width) > 8 else 1, padding=1), nn.ReLU(),
                     nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()]
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

    def act(self, obs: Tensor, generator: torch.Generator | None = None,
            deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
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

    def action_noise(self, steps: int, batch: int, generator: torch.Generator | None = None,
                     device: torch.device | str = "cpu") -> Tensor:
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

    def sampler(self) -> "ActionSampler":
        """A fast no-grad actor for the rollout (a snapshot of the current weights)."""
        return ActionSampler(self)

    def scorer(self) -> "RolloutScorer":
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


class FoldedMLP:
    """A no-grad copy of an MLP (see `mlp_layers`) for a batch of inputs, with each hidden
    layer's activation f(z) = scale * kernel(gain * z) + shift folded into the weights: layer i
    outputs the kernel's value s_i, and the next layer absorbs the scale and shift,

        h W^T + b = s (scale W)^T + (b + shift W 1),   then x gain for the next kernel

    (for tanh: s_i = sigmoid(2 z_i)). One matmul and one in-place kernel per layer: five tensor
    ops for ppo-small instead of ten (small batches are launch-bound). The same function as the
    module to float32 rounding. Valid while the weights do not change: build one per rollout.
    """

    @torch.no_grad()
    def __init__(self, mlp: nn.Module):
        self.layers: list[tuple[Tensor, Tensor, Callable[[Tensor], Tensor] | None]] = []  # (bias, weight^T, kernel)
        previous: Activation | None = None
        for linear, activation in mlp_layers(mlp):
            weight, bias = linear.weight, linear.bias
            if previous is not None:  # the input is the previous kernel's s, h = scale s + shift
                bias = bias + previous.shift * weight.sum(1)
                weight = previous.scale * weight
            if activation is not None:  # the output feeds kernel(gain z)
                bias, weight = activation.gain * bias, activation.gain * weight
            # A transposed view, as nn.Linear uses it: for narrow outputs (the heads) MKL is
            # several times faster with it than with a contiguous copy.
            self.layers.append((bias.contiguous(), weight.contiguous().t(),
                                None if activation is None else activation.kernel))
            previous = activation

    @staticmethod
    def of(mlp: nn.Module | None) -> "FoldedMLP | None":
        """The folded copy, or None where the network has no derived form (use the module)."""
        try:
            return None if mlp is None else FoldedMLP(mlp)
        except UnsupportedNetwork:
            return None

    @torch.no_grad()
    def __call__(self, x: Tensor) -> Tensor:
        for bias, weight_t, kernel in self.layers:
            x = torch.addmm(bias, x, weight_t)
            if kernel is not None:
                kernel(x)
        return x


class ActionSampler:
    """The actor for the rollout: actions only, no gradients, from a snapshot of the weights
    (`FoldedMLP` for the MLP policies; convolutional ones use their own forward pass). The
    log-probabilities and values the update needs are computed afterwards for the whole
    rollout at once (`RolloutScorer`). The randomness of a whole rollout is drawn up front
    (`noise`), so that each step only adds its share to the head."""

    def __init__(self, policy: ActorCritic):
        self.policy = policy
        self.std = None if policy.discrete else policy.log_std.detach().exp()
        self.actor = FoldedMLP.of(policy.actor) if policy.torso is None else None
        self.noise = policy.action_noise

    @torch.no_grad()
    def __call__(self, obs: Tensor, noise: Tensor) -> Tensor:
        """Sampled actions for a batch of (normalised) observations and one step of `noise`."""
        if self.actor is None:
            head = self.policy.actor(self.policy._features(obs)[0])
        else:
            head = self.actor(obs.reshape(obs.shape[0], -1))
        return self.policy.noisy_action(head, noise, self.std)


class RolloutScorer:
    """pi_old(a|s) and V_old(s) of a rollout's samples, chunk by chunk, from a snapshot of the
    weights (`FoldedMLP` for the MLP policies, made once for the whole rollout)."""

    def __init__(self, policy: ActorCritic):
        self.policy = policy
        folded = policy.torso is None
        self.actor = (FoldedMLP.of(policy.actor) if folded else None) or policy.actor
        self.critic = (FoldedMLP.of(policy.critic) if folded else None) or policy.critic

    @torch.no_grad()
    def __call__(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """(log pi(action|obs), V(obs)) for a batch of (normalised) observations."""
        actor_input, critic_input = self.policy._features(obs)
        head, value = self.actor(actor_input), self.critic(critic_input)
        return self.policy._log_prob(head, action), value.squeeze(-1)
