"""A network described as a plain dict (the `spec`), chosen by `model_type`.

    ppo-small   actor and critic MLPs, 64 x 64, tanh
    ppo-medium  actor and critic MLPs, 256 x 256, tanh
    ppo-large   actor and critic MLPs, 512 x 512 x 256, tanh
    ppo-cnn     a shared convolutional torso (ReLU) for image or grid observations, then
                one linear head for the actor and one for the critic
    ppo-lstm    a recurrent policy: Linear 64 + tanh, an LSTM of 64, then the two heads
                (trainer/nets/recurrent.py); PPO and A2C train it on whole sequences

Every checkpoint saves the spec, so that `trainer.nets.policies.build_policy(spec)` rebuilds the
network without unpickling any Python object.
"""

from __future__ import annotations

import numpy as np

MLP_HIDDEN_SIZES = {"ppo-small": (64, 64), "ppo-medium": (256, 256), "ppo-large": (512, 512, 256)}
CNN_FEATURES = 512
RECURRENT_MODEL_TYPES = ("ppo-lstm",)  # a state carried from step to step: the network "recurrent-actor-critic"
LSTM_SIZE = 64


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
            f"observes a vector of shape {tuple(obs_shape)}; use ppo-small, ppo-medium or ppo-large"
        )
    spec = {
        "model_type": model_type,
        "obs_shape": obs_shape,
        "obs_scale": obs_scale,
        "action": action,
        "norm_obs": bool(norm_obs),
    }
    if model_type in RECURRENT_MODEL_TYPES:
        spec.update(network="recurrent-actor-critic", lstm_size=LSTM_SIZE)
    return spec


def is_recurrent(spec: dict) -> bool:
    """Whether the spec's network carries a state from step to step (PPO then trains it on sequences)."""
    return spec.get("network") == "recurrent-actor-critic"
