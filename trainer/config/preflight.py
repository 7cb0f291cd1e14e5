"""Checks a run must pass before anything is written: its env builds with these options, and it
fits in the memory of the machine it would train on; and the warnings about a run that would
start but is likely not what was meant (one update larger than the whole run, a rollout that
takes a large share of the machine's memory).

    warnings = check_run_fits(config)   # ConfigError naming the key and the numbers; else the warnings

Called by `trainer.run.loop.train` and the studio's Start before a run folder exists, so a run that
would fail in its first second (an unknown `env_kwargs` key, `num_envs: 10**7` on a laptop) never
starts. Custom-code permission is checked before this (trainer.config.permissions.require_code_permission):
building the probe env imports what the config names.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from trainer.config.algorithm_keys import ALGORITHM_TABLE
from trainer.config.checks import ConfigError
from trainer.config.keys import TrainConfig

MEMORY_SHARE = 0.8  # a run may plan to use this share of the memory that is free now
WARN_MEMORY_SHARE = 0.25  # a run planning on more than this share of it starts, with a warning
FLOATS_PER_SAMPLE = 10  # action, log-prob, value, reward, done, advantage, return, ... per stored step
COPIES_OF_THE_BATCH = 2.5  # the rollout storage, its flattened view for the update, minibatch gathers
ENV_STATE_COPIES = 8  # a native env holds its state, observations and final observations a few times
MIN_FREE_DISK_BYTES = 100 * 2**20  # a run refuses to start with less free on the runs disk


def probe_spaces(config: TrainConfig):
    """Build the env once (one copy, on the CPU) and return its observation and action spaces."""
    from envs import make_vec_env
    from envs.errors import EnvError

    try:
        env = make_vec_env(
            config.env_name, 1, device="cpu", seed=config.seed, wrappers=config.wrappers or None, **config.env_kwargs
        )
    except EnvError as error:
        raise ConfigError(f"env_kwargs / env_name: {error}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(
            f"env_kwargs: the environment {config.env_name!r} refused its options: {str(error)[:300]}"
        ) from None
    try:
        return env.single_observation_space, env.single_action_space
    finally:
        env.close()


def estimated_bytes(config: TrainConfig, observation_space, action_space) -> int:
    """Memory the run's tensors need, within a factor of ~2: the rollout storage dominates."""
    obs_floats = math.prod(observation_space.shape or (1,))
    action_floats = math.prod(getattr(action_space, "shape", None) or (1,))
    per_sample = (obs_floats + action_floats + FLOATS_PER_SAMPLE) * 4
    rollout = config.num_steps * config.num_envs * per_sample * COPIES_OF_THE_BATCH
    envs = config.num_envs * obs_floats * 4 * ENV_STATE_COPIES
    if "buffer_size" in config.algo_settings:  # DQN, SAC: the replay buffer, not a rollout
        return int(replay_bytes(config.buffer_size, config.num_envs, obs_floats, action_floats) + envs)
    return int(rollout + envs)


def replay_bytes(capacity: int, num_envs: int, obs_floats: int, action_floats: int) -> int:
    """The replay buffer of trainer/algos/replay.py: per transition two float32 observations (the
    step's and the one it led to), an action (8 bytes a value at most), a float32 reward and two
    flags; with prioritised replay a sum tree of float64 nodes (counted always: it is small)."""
    items = capacity // num_envs * num_envs
    leaves = 1 << max(1, (items - 1).bit_length())
    return items * (2 * 4 * obs_floats + 8 * action_floats + 4 + 2) + 2 * leaves * 8


def free_bytes(device: str) -> tuple[int, str]:
    """Memory free on the device the run would use, and its name for messages."""
    import torch

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        index = int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0
        free, _ = torch.cuda.mem_get_info(index)
        return int(free), f"GPU cuda:{index}"
    import psutil

    return int(psutil.virtual_memory().available), "this machine"


def check_writable_folder(folder: str | Path, option: str) -> None:
    """ConfigError unless `folder` is (or can be made as) a folder this process can write into;
    nothing is created. `option` (e.g. "--runs-dir") is named in the message."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{option} {folder}: {existing} is a file, not a folder; pick a folder for the runs")
    # os.access also sees a read-only file system (EROFS), which root's permissions do not bypass.
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{option} {folder}: {existing} is not writable by this user (or is on a read-only file "
            f"system); pick a folder you can write to"
        )
    check_disk_space(existing, option)


def check_disk_space(folder: str | Path, option: str, minimum: int = MIN_FREE_DISK_BYTES) -> None:
    """ConfigError when the disk holding `folder` has less than `minimum` bytes free: a run there
    would stop at its first checkpoint (a full disk is an error, not silently lost work)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # not there yet or unreadable: check_writable_folder has the clearer message
    if free < minimum:
        raise ConfigError(
            f"{option} {folder}: only {free / 2**20:.0f} MiB free on its disk, a run needs at least "
            f"{minimum / 2**20:.0f} MiB for checkpoints and logs; free some space (the Runs tab "
            f"deletes old runs and checkpoints) or pick a folder on another disk"
        )


def check_action_kind(config: TrainConfig, action_space) -> None:
    """ConfigError when the algorithm takes only one kind of actions and the env has the other."""
    wanted = ALGORITHM_TABLE[config.algo].actions if config.algo in ALGORITHM_TABLE else None
    kind = {"Discrete": "discrete", "Box": "continuous"}.get(type(action_space).__name__)
    if wanted is None or kind is None or kind == wanted:
        return
    others = [name for name, entry in ALGORITHM_TABLE.items() if entry.actions in (None, kind)]
    raise ConfigError(
        f"algo {config.algo} takes {wanted} actions, but {config.env_name} has {kind} ones ({action_space}): "
        f"use algo {' or '.join(others)} for this env"
    )


def check_run_fits(config: TrainConfig) -> list[str]:
    """ConfigError when the env refuses the config's env options, or the run would need more
    memory than the device it trains on has free; else the run's warnings (`run_warnings`), for
    the CLI to print and the studio's form to show."""
    observation_space, action_space = probe_spaces(config)
    check_action_kind(config, action_space)
    needed = estimated_bytes(config, observation_space, action_space)
    free, where = free_bytes(config.device)
    if needed > MEMORY_SHARE * free:
        obs_floats = math.prod(observation_space.shape or (1,))
        if "buffer_size" in config.algo_settings:
            raise ConfigError(
                f"buffer_size {config.buffer_size:_} transitions of {obs_floats:_} observation values need about "
                f"{needed / 2**30:.1f} GiB, but {where} has {free / 2**30:.1f} GiB free. Lower buffer_size "
                f"(a run may plan on {MEMORY_SHARE:.0%} of the free memory)"
            )
        raise ConfigError(
            f"num_envs x num_steps = {config.num_envs:_} x {config.num_steps:_} samples of {obs_floats:_} "
            f"observation values need about {needed / 2**30:.1f} GiB, but {where} has {free / 2**30:.1f} GiB "
            f"free. Lower num_envs or num_steps (a run may plan on {MEMORY_SHARE:.0%} of the free memory)"
        )
    return run_warnings(config, needed, free, where)


def run_warnings(config: TrainConfig, needed: int, free: int, where: str) -> list[str]:
    """What would start but is likely a slip (each a sentence naming the keys and the numbers):
    one update collecting more steps than total_timesteps (the run is then that one update, its
    rollout and first checkpoint sized by it), or a run whose tensors (`needed` bytes, from
    `estimated_bytes`) take more than WARN_MEMORY_SHARE of the `free` memory of `where`."""
    found = []
    batch = config.num_envs * config.num_steps
    if batch > config.total_timesteps:
        found.append(
            f"one update collects num_envs x num_steps = {config.num_envs:_} x {config.num_steps:_} = {batch:_} "
            f"steps, more than total_timesteps ({config.total_timesteps:_}): the run is a single update of "
            f"{batch:_} steps. Lower num_envs or num_steps, or raise total_timesteps"
        )
    if free > 0 and needed > WARN_MEMORY_SHARE * free:
        what = (
            f"buffer_size {config.buffer_size:_}"
            if "buffer_size" in config.algo_settings
            else f"num_envs x num_steps = {config.num_envs:_} x {config.num_steps:_}"
        )
        found.append(
            f"{what} needs about {needed / 2**30:.1f} GiB, {needed / free:.0%} of the {free / 2**30:.1f} GiB "
            f"{where} has free (more than {WARN_MEMORY_SHARE:.0%}): other programs and runs may run short"
        )
    return found
