"""Checkpoints and trained models: atomic writes, safe loads, and `load_model(path).predict(obs)`.

A `.pth` written here is a plain dict of tensors and plain Python values, so
`torch.load(path, weights_only=True)` opens it and nothing in it can run code:

    format            "rl-studio"        format_version  2
    kind              "checkpoint" (resumable) or "model" (the final policy)
    algo              the algorithm that trained it (trainer/algos/registry.py): resuming builds it
    policy_spec       how to rebuild the playing network (model type, observation shape, action space)
    policy_state      its state_dict (observation-normalisation statistics included)
    config            the full training config as a dict
    global_step, update, elapsed
    versions          torch / python / rl-studio versions that wrote it
  checkpoints only:
    algorithm_state   the algorithm's own state (`Algorithm.state_dict`; PPO / A2C: Adam's moments
                      and step count, the running return statistics of norm_reward)
    rng               generator states of the trainer (action sampling, minibatches)
    env_state         tensors and generator state of the native env (exact resume)
    next_obs          the observations the next rollout starts from
    gif_seconds       time spent on GIFs so far (their budget)

Loading goes through `read_checkpoint`, which only ever calls `torch.load(weights_only=True)`
and turns a refusal into a `CheckpointError` that says why. Format 1 (before `algorithm_state`:
PPO's `optimizer_state` and `reward_scaler` at the top level) still loads and resumes
(trainer/run/resume.py `algorithm_state`); a newer format is refused, naming its version.
"""

from __future__ import annotations

import math
import pickle
import platform
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

# The atomic writer and the folder's names live in the torch-free run modules the studio uses too.
from trainer.run.files import atomic_write
from trainer.run.layout import list_checkpoints

FORMAT = "rl-studio"
FORMAT_VERSION = 2  # 2: the algorithm's own state under `algorithm_state` (1: PPO's at the top level)
RL_STUDIO_VERSION = "0.1.0"

# Bounds a .pth must meet before torch.load allocates anything (issue 10: a 40 KB file must not
# build a 10 GB network, a 1 MB zip must not inflate to 1 GB). torch.save stores its members
# uncompressed, so a real file inflates ~1x; a compressed member can only come from a crafted
# file. 20x the file size leaves room for any honest writer, 4 GiB caps large files in absolute
# terms (the biggest real checkpoints, CNN policies with env state, are tens of MB).
MAX_FILE_BYTES = 4 * 2**30
MAX_INFLATION = 20
MAX_UNCOMPRESSED_BYTES = 4 * 2**30
MAX_ZIP_MEMBERS = 100_000
MAX_PARAMETERS = 10**8  # ~400 MB of float32 weights; the largest preset network has ~1.5 million


class CheckpointError(Exception):
    """A .pth file cannot be used: unsafe, corrupt, or not written by RL Studio."""


def library_versions() -> dict:
    return {
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "rl_studio": RL_STUDIO_VERSION,
        "numpy": str(np.__version__),
    }


# ---------------------------------------------------------------------------------------------
# Writing and reading


def payload_bytes(value: Any) -> int:
    """Bytes of the tensors in a payload (nested dicts / lists): what saving it writes, about."""
    if isinstance(value, Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(payload_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(item) for item in value)
    return 0


def atomic_save(payload: dict, path: str | Path) -> Path:
    """torch.save through the run folder's one atomic writer: a crash (even SIGKILL) mid-write
    leaves the previous file at `path` untouched. A failed write raises StorageError: on a full
    disk "no space left on <path>" (torch itself only says "unexpected pos ...")."""
    from trainer.run.storage import storage_error

    try:
        return atomic_write(path, lambda file: torch.save(payload, file))
    except (OSError, RuntimeError) as error:
        if isinstance(error, RuntimeError) and not _is_write_failure(error):
            raise
        # The temporary file is gone again, so free space is what the write had: less than the
        # payload means the disk was full, whatever torch's message says.
        raise storage_error(path, error, needed=payload_bytes(payload) + 2**16) from None


def _is_write_failure(error: RuntimeError) -> bool:
    text = str(error)
    return any(part in text for part in ("unexpected pos", "write failed", "inline_container", "No space left"))


def check_archive_bounds(path: Path) -> None:
    """Refuse a .pth whose size or whose zip members' uncompressed sizes exceed the caps above,
    reading only the zip directory (nothing is inflated or allocated)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise CheckpointError(
            f"{path} is {size / 2**30:.1f} GiB, over the {MAX_FILE_BYTES / 2**30:.0f} GiB limit "
            f"for a model file; it was not loaded"
        )
    if not zipfile.is_zipfile(path):
        return  # torch's legacy (pre-1.6) format stores tensors uncompressed: the file size bounds it
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable PyTorch file (damaged zip: {error})") from None
    if len(members) > MAX_ZIP_MEMBERS:
        raise CheckpointError(
            f"{path} has {len(members):_} archive members (at most {MAX_ZIP_MEMBERS:_}); it was not loaded"
        )
    inflated = sum(member.file_size for member in members)
    limit = min(MAX_UNCOMPRESSED_BYTES, MAX_INFLATION * size + 2**20)
    if inflated > limit:
        raise CheckpointError(
            f"{path} would inflate from {size:_} bytes to {inflated:_} bytes (limit {limit:_}: "
            f"{MAX_INFLATION}x the file, at most {MAX_UNCOMPRESSED_BYTES / 2**30:.0f} GiB). RL Studio writes "
            f"its tensors uncompressed, so this file was crafted or damaged; it was not loaded"
        )


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load an RL Studio .pth safely (weights only, size-bounded). Raises CheckpointError with the reason."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no such file: {path}")
    check_archive_bounds(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        text = str(error)
        if "global" not in text.lower():  # not a pickle of objects at all: a damaged or foreign file
            raise CheckpointError(
                f"{path} is not a readable PyTorch file (damaged or not a .pth); nothing from it was executed"
            ) from None
        detail = next((line.strip() for line in text.splitlines() if "Unsupported global" in line), "")
        raise CheckpointError(
            f"refused to load {path}: it contains Python objects other than tensors and plain values, "
            f"and loading those could run code hidden in the file. RL Studio models never contain "
            f"such objects, so this file was not written by RL Studio or was tampered with. "
            f"Nothing from it was executed. ({detail})"
        ) from None
    except Exception as error:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise CheckpointError(
            f"{path} is not a readable PyTorch file (damaged or not a .pth): {type(error).__name__}: {error}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is a PyTorch file but not an RL Studio model or checkpoint (it has no "
            f"format: {FORMAT!r} entry); load_model only reads files written by this trainer"
        )
    if payload.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer RL Studio (format version {payload['format_version']}); upgrade to load it"
        )
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
        if (
            isinstance(current, Tensor)
            and current.shape == value.shape
            and current.dtype == value.dtype
            and not _is_broadcast(current)
        ):
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
    def predict(
        self, obs, deterministic: bool = True, state: Any = None, episode_start: Any = None, action_masks: Any = None
    ) -> tuple[np.ndarray, Any]:
        """(actions, state) for `obs`, as in Stable-Baselines3. `action_masks` (discrete actions;
        sb3-contrib's keyword): the allowed actions, bools of shape (n,) for one observation or
        (B, n) for a batch; forbidden ones are never chosen (trainer/nets/masks.py).

        A recurrent policy (`model_type: ppo-lstm`) answers as sb3-contrib's RecurrentPPO: `state`
        is None at the start of an episode (or what the last call returned: (h, c), each (1, B,
        size)) and comes back updated; `episode_start` (B booleans) zeroes it where an episode
        starts. Any other policy returns `state` as it was given."""
        if self.policy.recurrent:
            return self.policy.predict(
                obs, state=state, episode_start=episode_start, deterministic=deterministic, action_masks=action_masks
            )
        tensor = torch.as_tensor(np.asarray(obs.cpu() if isinstance(obs, Tensor) else obs), dtype=torch.float32)
        single = tuple(tensor.shape) == self.observation_shape
        if single:
            tensor = tensor.unsqueeze(0)
        elif tensor.dim() != len(self.observation_shape) + 1 or tuple(tensor.shape[1:]) != self.observation_shape:
            batch = ", ".join(("N", *map(str, self.observation_shape)))
            raise ValueError(
                f"expected observations of shape {self.observation_shape} (or a batch ({batch})), "
                f"got {tuple(tensor.shape)}"
            )
        tensor = tensor.to(self.device)
        mask = None
        if action_masks is not None:
            from trainer.nets.masks import as_mask

            self.policy.check_action_mask(action_masks, rows=False)  # continuous: refused, clearly
            mask = as_mask(action_masks, tensor.shape[0], self.policy.action_size, self.device)
        action, _, _ = self.policy.act(self.policy.normalize_obs(tensor), deterministic=deterministic, action_mask=mask)
        action = self.policy.env_action(action).cpu().numpy()
        return (action[0] if single else action), state

    def __call__(self, obs, deterministic: bool = True) -> np.ndarray:
        return self.predict(obs, deterministic=deterministic)[0]

    def __repr__(self) -> str:
        return (
            f"TrainedModel({self.spec['model_type']}, env={self.env_name}, step={self.global_step}, "
            f"obs={self.observation_shape}, device={self.device})"
        )


def weights_mismatch(expected: dict, state: Any) -> str | None:
    """Why `state` (a saved state_dict) does not fit a network whose state_dict is `expected`
    (tensors, possibly on the meta device): the first tensor that is missing, extra or of another
    shape, with both shapes; None when every tensor fits."""
    if not isinstance(state, dict):
        return f"policy_state is a {type(state).__name__}, not a dict of tensors"
    for name, tensor in expected.items():
        saved = state.get(name)
        if not isinstance(saved, Tensor):
            return f"tensor {name!r} (shape {tuple(tensor.shape)}) is missing"
        if tuple(saved.shape) != tuple(tensor.shape):
            return f"tensor {name!r} has shape {tuple(saved.shape)} in the file, but the network needs {tuple(tensor.shape)}"
    extra = [str(name)[:80] for name in state if name not in expected]
    return f"the file has tensors the network does not: {', '.join(extra[:3])}" if extra else None


def check_spec_fits_weights(spec: Any, state: Any, source: str | Path) -> None:
    """Check a saved policy_spec against the saved weights before any memory is spent on it: the
    network is built on the meta device (shapes only, no storage), its size is bounded by
    MAX_PARAMETERS, and every tensor shape must match. CheckpointError names the tensor."""
    from trainer.nets.build import build_policy

    if not isinstance(spec, dict):
        raise CheckpointError(f"{source}: policy_spec is a {type(spec).__name__}, not a dict")
    obs_shape = spec.get("obs_shape")
    if (
        not isinstance(obs_shape, (list, tuple))
        or not 1 <= len(obs_shape) <= 4
        or not all(isinstance(size, int) and size >= 1 for size in obs_shape)
    ):
        raise CheckpointError(
            f"{source}: policy_spec.obs_shape must be 1 to 4 positive integers, got {str(obs_shape)[:80]}"
        )
    if math.prod(obs_shape) > MAX_PARAMETERS:
        raise CheckpointError(
            f"{source}: policy_spec.obs_shape {list(obs_shape)} has {math.prod(obs_shape):_} "
            f"values, more than any network here takes (at most {MAX_PARAMETERS:_})"
        )
    try:
        with torch.device("meta"):
            skeleton = build_policy(spec)
    except Exception as error:  # noqa: BLE001 - a malformed spec can fail in many ways
        raise CheckpointError(
            f"{source}: policy_spec does not describe a network RL Studio can build: "
            f"{type(error).__name__}: {str(error)[:200]}"
        ) from None
    parameters = sum(parameter.numel() for parameter in skeleton.parameters())
    if parameters > MAX_PARAMETERS:
        raise CheckpointError(
            f"{source}: policy_spec describes a network of {parameters:_} parameters "
            f"(at most {MAX_PARAMETERS:_}); it was not built"
        )
    problem = weights_mismatch(skeleton.state_dict(), state)
    if problem:
        raise CheckpointError(f"{source}: the saved weights do not fit the network described in it: {problem}")


def load_model(path: str | Path, device: str | torch.device = "cpu") -> TrainedModel:
    """Load a final model or a checkpoint written by the trainer, for acting.

    device: "cpu" (default), "cuda", "cuda:N" or "auto". Raises CheckpointError for files that
    are unsafe, damaged, oversized, not RL Studio models, or whose weights do not fit their own
    policy_spec (checked before the network is built). No env is built and nothing the file
    names is imported: `trainer.serving.evaluate.evaluate` decides which env a model plays."""
    from trainer.nets.build import build_policy

    if str(device) == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {str(device)!r} asked for, but this machine has no usable CUDA GPU; use device 'cpu' or 'auto'"
        )
    payload = read_checkpoint(path, map_location=device)
    if "policy_spec" not in payload or "policy_state" not in payload:
        raise CheckpointError(f"{path} has no policy in it (policy_spec / policy_state missing)")
    check_spec_fits_weights(payload["policy_spec"], payload["policy_state"], path)
    policy = build_policy(payload["policy_spec"]).to(device)
    policy.load_state_dict(payload["policy_state"])
    policy.eval()
    return TrainedModel(policy, payload, device)
