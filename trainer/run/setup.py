"""What a run is built from, before the loop starts: the run folder's file sinks, the device, the
CPU threads, the learning rate after `lr_scaling`, the environment and the network's description.

Each is a plain function of the config (and of the distributed context), so the loop, the CLI,
the Python API and the benchmarks choose them the same way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import torch

from trainer.config.keys import TrainConfig
from trainer.nets.spec import make_policy_spec
from trainer.run.events import EventBus
from trainer.run.layout import events_path, holds_a_run, log_path, tensorboard_path
from trainer.run.ranks import DistributedContext
from trainer.run.resume import ResumeError
from trainer.run.sinks import JsonlSink, LogSink, TensorBoardSink

# (num_envs, device, seed) -> VecEnv: how a session builds its env (and the GIF env)
EnvFactory = Callable[[int, "torch.device | str", int], object]


def open_run_dir(bus: EventBus, run_dir: Path, config: TrainConfig, resume: bool = False) -> None:
    """Make (or reopen, to resume) a run directory and attach its file sinks, metrics.jsonl and
    train.log. Refuses a directory that holds another run unless resuming."""
    if not resume and holds_a_run(run_dir, config):
        raise ResumeError(
            f"{run_dir} already holds a run (metrics.jsonl / checkpoints); resume it "
            f"(--resume {run_dir}) or train into a new run directory"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    bus.sinks += [JsonlSink(events_path(run_dir)), LogSink(log_path(run_dir), log_interval=config.log_interval)]


def attach_tensorboard(bus: EventBus, run_dir: Path) -> None:
    """TensorBoard scalars in <run_dir>/tensorboard (a warning, not a failure, without the package)."""
    try:
        bus.sinks.append(TensorBoardSink(tensorboard_path(run_dir)))
    except ImportError:
        bus.log(
            "tensorboard: true, but the tensorboard package is not installed "
            "(pip install tensorboard); continuing without TensorBoard logs",
            level="warning",
        )


def device_type(config: TrainConfig) -> str:
    """`cuda` or `cpu` (or another torch device type) for the config's `device`."""
    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return config.device.split(":")[0]


def pick_device(config: TrainConfig, context: DistributedContext | None) -> torch.device:
    """`auto` -> CUDA when available; under torchrun, local rank i gets gpu_ids[i] (or GPU i)."""
    kind = device_type(config)
    if kind != "cuda":
        return torch.device(kind)
    if context is not None:
        ids = config.gpu_ids or list(range(torch.cuda.device_count()))
        index = ids[context.local_rank % len(ids)]
    elif ":" in config.device:
        index = int(config.device.split(":")[1])
    else:
        index = (config.gpu_ids or [0])[0]
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def set_threads(config: TrainConfig, device: torch.device, world_size: int = 1) -> None:
    threads = config.torch_threads
    if threads == 0 and device.type == "cpu":
        # Small MLPs are launch-bound: one thread is as fast as two and leaves a core free.
        # A CNN gets the cores this process may use (its CPU quota under `docker run --cpus`, not
        # the host's count that torch would take: threads beyond the quota are throttled, not run).
        from envs.cores import available_cores

        threads = 1 if config.model_type != "ppo-cnn" or world_size > 1 else available_cores()
    if threads:
        torch.set_num_threads(threads)


def scaled_learning_rate(config: TrainConfig, world_size: int = 1) -> tuple[float, str | None]:
    """The learning rate after `lr_scaling`, and the log line that explains it (None for `none`)."""
    rule = config.lr_scaling
    samples = config.mini_batch_size * world_size
    ratio = samples / config.lr_reference_batch
    factor = {"none": 1.0, "sqrt": math.sqrt(ratio), "linear": ratio}[rule]
    scaled = config.learning_rate * factor
    if rule == "none":
        return scaled, None
    return scaled, (
        f"lr_scaling {rule}: {samples} samples per gradient step vs reference "
        f"{config.lr_reference_batch} -> learning rate {config.learning_rate:g} x {factor:.3g} "
        f"= {scaled:.3g}"
    )


def make_training_env(
    config: TrainConfig, num_envs: int, device: torch.device | str, seed: int, log: Callable[[str], None] | None = None
):
    """The env the config names. Built-in games are batched tensor envs: they need no
    vector_env / num_workers, which then only earn a log line."""
    from envs import builtin_env_names, make_vec_env, resolve_env_name

    vector_env, num_workers = config.vector_env, config.num_workers
    canonical = resolve_env_name(config.env_name)
    if canonical in builtin_env_names() and not config.wrappers and (vector_env or num_workers):
        if log is not None:
            log(
                f"{config.env_name} runs as one batched tensor env ({num_envs} games in a few tensor ops per "
                f"step), so it needs no vector_env / worker processes: vector_env={vector_env!r}, "
                f"num_workers={num_workers!r} are ignored (they apply to Gymnasium envs; use "
                f"env_name: gym:{config.env_name} to force Gymnasium's vector env)"
            )
        vector_env = num_workers = None
    env = make_vec_env(
        config.env_name,
        num_envs,
        device=device,
        seed=seed,
        vector_env=vector_env,
        num_workers=num_workers,
        wrappers=config.wrappers or None,
        **config.env_kwargs,
    )
    if log is not None and getattr(env, "vectorization", None):
        log(env.vectorization)  # which vectorisation the Gymnasium adapter chose, and why
    return env


def config_env_factory(
    config: TrainConfig, log: Callable[[str], None] | None = None, in_process: bool = False
) -> EnvFactory:
    """The env factory of a config (its env_name / env_kwargs / wrappers / vector_env).
    in_process: ignore vector_env / num_workers (the GIF env is one env in this process)."""
    if in_process:
        config = dataclasses.replace(config, vector_env=None, num_workers=None)

    def factory(num_envs: int, device: torch.device | str, seed: int):
        return make_training_env(config, num_envs, device, seed, log=log)

    return factory


def policy_spec(config: TrainConfig, env) -> dict:
    """The network's description for this env (`hidden_sizes`, when set, replaces the preset sizes
    of an MLP `model_type`)."""
    spec = make_policy_spec(config.model_type, env.single_observation_space, env.single_action_space, config.norm_obs)
    if config.hidden_sizes:
        spec["hidden_sizes"] = list(config.hidden_sizes)
    return spec
