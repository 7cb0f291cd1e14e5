"""Checkpoints and trained models: atomic writes, safe loads, and `load_model(path).predict(obs)`.

A `.pth` written here is a plain dict of tensors and plain Python values, so
`torch.load(path, weights_only=True)` opens it and nothing in it can run code:

    format            "rl-studio"        format_version  1
    kind              "checkpoint" (resumable) or "model" (the final policy)
    policy_spec       how to rebuild the network (model type, observation shape, action space)
    policy_state      the network's state_dict (observation-normalisation statistics included)
    config            the full training config as a dict
    global_step, update, elapsed
    versions          torch / python / rl-studio versions that wrote it
  checkpoints only:
    optimizer_state   Adam moments and step count
    reward_scaler     running return statistics (norm_reward)
    rng               generator states of the trainer (action sampling, minibatches)
    env_state         tensors and generator state of the native env (exact resume)
    next_obs          the observations the next rollout starts from
    gif_seconds       time spent on GIFs so far (their budget)

Loading goes through `read_checkpoint`, which only ever calls `torch.load(weights_only=True)`
and turns a refusal into a `CheckpointError` that says why.
"""
from __future__ import annotations

import pickle
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

# The folder's names and the atomic writer live in the torch-free run layout; re-exported here.
from trainer.run_dir import atomic_write, checkpoint_path, list_checkpoints, remove_stale_temporaries  # noqa: F401

FORMAT = "rl-studio"
FORMAT_VERSION = 1
RL_STUDIO_VERSION = "0.1.0"


class CheckpointError(Exception):
    """A .pth file cannot be used: unsafe, corrupt, or not written by RL Studio."""


def library_versions() -> dict:
    return {"torch": str(torch.__version__), "python": platform.python_version(), "rl_studio": RL_STUDIO_VERSION,
            "numpy": str(np.__version__)}


# ---------------------------------------------------------------------------------------------
# Writing and reading


def atomic_save(payload: dict, path: str | Path) -> Path:
    """torch.save through the run folder's one atomic writer: a crash (even SIGKILL) mid-write
    leaves the previous file at `path` untouched."""
    return atomic_write(path, lambda file: torch.save(payload, file))


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load an RL Studio .pth safely (weights only). Raises CheckpointError with the reason."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no such file: {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        text = str(error)
        if "global" not in text.lower():  # not a pickle of objects at all: a damaged or foreign file
            raise CheckpointError(f"{path} is not a readable PyTorch file (damaged or not a .pth); nothing "
                                  f"from it was executed") from None
        detail = next((line.strip() for line in text.splitlines() if "Unsupported global" in line), "")
        raise CheckpointError(
            f"refused to load {path}: it contains Python objects other than tensors and plain values, "
            f"and loading those could run code hidden in the file. RL Studio models never contain "
            f"such objects, so this file was not written by RL Studio or was tampered with. "
            f"Nothing from it was executed. ({detail})") from None
    except Exception as error:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise CheckpointError(f"{path} is not a readable PyTorch file (damaged or not a .pth): "
                              f"{type(error).__name__}: {error}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is a PyTorch file but not an RL Studio model or checkpoint (it has no "
            f"format: {FORMAT!r} entry); load_model only reads files written by this trainer")
    if payload.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{path} was written by a newer RL Studio (format version "
                              f"{payload['format_version']}); upgrade to load it")
    return payload


# ---------------------------------------------------------------------------------------------
# The checkpoint folder


def latest_checkpoint(folder: str | Path, map_location="cpu") -> tuple[Path, dict] | None:
    """The newest checkpoint that loads; damaged ones are skipped (older ones are tried)."""
    for _, path in reversed(list_checkpoints(folder)):
        try:
            return path, read_checkpoint(path, map_location)
        except CheckpointError:
            continue
    return None


def prune_checkpoints(folder: str | Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints, and temporary files of dead writers."""
    for _, path in list_checkpoints(folder)[:-keep]:
        path.unlink(missing_ok=True)
    remove_stale_temporaries(folder)


# ---------------------------------------------------------------------------------------------
# Env state, for resuming a native env exactly where it was


def capture_env_state(env) -> dict | None:
    """Every tensor and generator state of a native env and of its episode statistics.

    Gymnasium-backed envs hold their state in Python objects (often in other processes); they
    return None, and a resumed run starts them on fresh episodes."""
    if type(env).__module__.startswith("envs.gym_vec"):
        return None
    stats = getattr(env, "stats", None)
    if hasattr(stats, "flush"):
        stats.flush()  # EpisodeStats keeps its last steps in a log that is not a tensor attribute
    state: dict[str, Tensor] = {}
    for prefix, owner in (("env", env), ("stats", stats)):
        if owner is None:
            continue
        for name, value in vars(owner).items():
            if isinstance(value, Tensor):
                state[f"{prefix}.{name}"] = value.detach().clone()
            elif isinstance(value, torch.Generator):
                state[f"{prefix}.{name}#generator"] = value.get_state()
    return state


def restore_env_state(env, state: dict) -> None:
    owners = {"env": env, "stats": getattr(env, "stats", None)}
    for key, value in state.items():
        prefix, _, name = key.partition(".")
        owner = owners[prefix]
        if name.endswith("#generator"):
            getattr(owner, name[: -len("#generator")]).set_state(value)
            continue
        current = getattr(owner, name, None)
        value = value.to(env.device) if value.device != env.device else value
        if (isinstance(current, Tensor) and current.shape == value.shape and current.dtype == value.dtype
                and not _is_broadcast(current)):
            current.copy_(value)  # in place: keeps any views the env holds
        else:
            setattr(owner, name, value.clone())


def _is_broadcast(tensor: Tensor) -> bool:
    """An expanded tensor (several elements share one memory location) cannot be written in place."""
    return any(stride == 0 and size > 1 for stride, size in zip(tensor.stride(), tensor.shape))


# ---------------------------------------------------------------------------------------------
# Using a trained model


class TrainedModel:
    """A trained policy, ready to act: `action, _ = model.predict(obs, deterministic=True)`.

    `obs` is one observation (shape `observation_shape`) or a batch (B, *observation_shape), as
    a numpy array, list or tensor; the actions come back as numpy (one action for one
    observation, an array of B actions for a batch). Observation normalisation, if the model
    was trained with it, is applied inside.
    """

    def __init__(self, policy, payload: dict, device: torch.device):
        self.policy = policy
        self.device = device
        self.config: dict = payload.get("config", {})
        self.spec: dict = payload["policy_spec"]
        self.global_step: int = int(payload.get("global_step", 0))
        self.observation_shape: tuple[int, ...] = tuple(self.spec["obs_shape"])
        self.env_name: str | None = self.config.get("env_name")

    @torch.no_grad()
    def predict(self, obs, deterministic: bool = True, state: Any = None,
                episode_start: Any = None) -> tuple[np.ndarray, None]:
        """Actions for `obs`; the second value is the recurrent state (always None here),
        as in Stable-Baselines3."""
        tensor = torch.as_tensor(np.asarray(obs.cpu() if isinstance(obs, Tensor) else obs),
                                 dtype=torch.float32)
        single = tuple(tensor.shape) == self.observation_shape
        if single:
            tensor = tensor.unsqueeze(0)
        elif tuple(tensor.shape[1:]) != self.observation_shape:
            raise ValueError(f"expected one observation of shape {self.observation_shape} or a batch of shape "
                             f"(B, {', '.join(map(str, self.observation_shape))}), got {tuple(tensor.shape)}")
        tensor = tensor.to(self.device)
        action, _, _ = self.policy.act(self.policy.normalize_obs(tensor), deterministic=deterministic)
        action = self.policy.env_action(action).cpu().numpy()
        return (action[0], None) if single else (action, None)

    def __call__(self, obs, deterministic: bool = True) -> np.ndarray:
        return self.predict(obs, deterministic=deterministic)[0]

    def __repr__(self) -> str:
        return (f"TrainedModel({self.spec['model_type']}, env={self.env_name}, step={self.global_step}, "
                f"obs={self.observation_shape}, device={self.device})")


def load_model(path: str | Path, device: str | torch.device = "cpu") -> TrainedModel:
    """Load a final model or a checkpoint written by the trainer, for acting.

    device: "cpu" (default), "cuda", "cuda:N" or "auto". Raises CheckpointError for files that
    are unsafe, damaged, or not RL Studio models."""
    from trainer.models import build_policy

    if str(device) == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} asked for, but this machine has no usable CUDA GPU; "
                         f"use device 'cpu' or 'auto'")
    payload = read_checkpoint(path, map_location=device)
    if "policy_spec" not in payload or "policy_state" not in payload:
        raise CheckpointError(f"{path} has no policy in it (policy_spec / policy_state missing)")
    policy = build_policy(payload["policy_spec"]).to(device)
    try:
        policy.load_state_dict(payload["policy_state"])
    except RuntimeError as error:
        raise CheckpointError(f"{path}: the saved weights do not fit the network described in it: {error}") from None
    policy.eval()
    return TrainedModel(policy, payload, device)
