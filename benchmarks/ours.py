"""Our trainer under the benchmark: throughput, time to solve, games and the update-only ceiling.

Each function runs in a fresh process (see `benchmarks.contender`) and drives the real engine,
`trainer.run.loop.train`, through its public interface (config + event sinks + should_stop). Runs
write into a temporary run directory. Rollout GIFs and periodic checkpoints are turned off
(`gif_interval=0`, `checkpoint.interval=0`): Stable-Baselines3 does neither, and they are not
learning. Everything else in the shipped configs is used as shipped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.sb3_peer import NET_ARCH

# The model type whose network matches SB3's MlpPolicy default: actor and critic MLPs 64 x 64, tanh.
BENCHMARK_MODEL_TYPE = "ppo-small"
NO_SIDE_OUTPUTS = ["gif_interval=0", "checkpoint.interval=0"]


def shipped_settings(config_path: str | Path) -> dict[str, Any]:
    """num_envs / num_steps / epochs / minibatch / net of a shipped config, for the peer to copy."""
    from trainer.config.defaults import load_config
    from trainer.nets.spec import MLP_HIDDEN_SIZES

    config = load_config(config_path)
    return {
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "epochs": config.update_epochs,
        "minibatch_size": config.mini_batch_size,
        "hidden_sizes": list(MLP_HIDDEN_SIZES.get(config.model_type, NET_ARCH)),
        "model_type": config.model_type,
    }


def settings_overrides(settings: dict[str, Any]) -> list[str]:
    """Config overrides that give the trainer exactly these rollout / update / network settings."""
    from trainer.nets.spec import MLP_HIDDEN_SIZES

    if list(settings["hidden_sizes"]) != list(MLP_HIDDEN_SIZES[BENCHMARK_MODEL_TYPE]):
        raise ValueError(
            f"the benchmark network is {MLP_HIDDEN_SIZES[BENCHMARK_MODEL_TYPE]} "
            f"({BENCHMARK_MODEL_TYPE}), got hidden sizes {settings['hidden_sizes']}"
        )
    num_envs, num_steps = settings["num_envs"], settings["num_steps"]
    return [
        f"num_envs={num_envs}",
        f"num_steps={num_steps}",
        f"batch_size={num_envs * num_steps}",
        f"mini_batch_size={settings['minibatch_size']}",
        "num_minibatches=null",
        f"update_epochs={settings['epochs']}",
        f"model_type={BENCHMARK_MODEL_TYPE}",
    ]


def _threads() -> int:
    import torch

    return torch.get_num_threads()  # set by the contender process before anything ran


def _load(config_path: str | Path, overrides: list[str]):
    from trainer.config.defaults import load_config

    # The same thread count as the peer: the trainer would otherwise pick its own.
    return load_config(config_path, overrides=overrides + NO_SIDE_OUTPUTS + [f"torch_threads={_threads()}"])


class MetricsRecorder:
    """An event sink: records (train seconds, step, value) from each metrics event, notes when
    `value` first reaches each target, and asks the run to stop once all are reached or the
    training time passes `cap_seconds`."""

    def __init__(self, value_field: str, targets: list[float], cap_seconds: float | None, train_start: float):
        self.value_field = value_field
        self.targets = sorted(targets)
        self.cap_seconds = cap_seconds
        self.train_start = train_start
        self.series: list[tuple[float, int, float]] = []
        self.reached: dict[
            float, tuple[float, float, int, float]
        ] = {}  # target -> (train s, unix, step, trainer elapsed)
        self.metrics_events: list[dict] = []
        self.best: float | None = None

    def __call__(self, event: dict) -> None:
        if event["type"] != "metrics":
            return
        seconds = time.perf_counter() - self.train_start
        self.metrics_events.append({"step": event["step"], "elapsed": event["elapsed"], "seconds": seconds})
        value = event.get(self.value_field)
        if value is None:
            return
        self.best = value if self.best is None else max(self.best, value)
        self.series.append((seconds, int(event["step"]), float(value)))
        for target in self.targets:
            if target not in self.reached and value >= target:
                self.reached[target] = (seconds, time.time(), int(event["step"]), float(event["elapsed"]))

    def close(self) -> None:
        pass

    def should_stop(self) -> bool:
        if self.targets and len(self.reached) == len(self.targets):
            return True
        return self.cap_seconds is not None and time.perf_counter() - self.train_start > self.cap_seconds


def _train(
    config, recorder_factory: Callable[[float], MetricsRecorder], on_result: Callable[[Any], None] | None = None
) -> tuple[MetricsRecorder, float, int]:
    """Run `train` in a temporary run directory; (recorder, seconds of the train() call, steps).
    `on_result` gets the TrainResult after the timing, while its run directory (the final model
    file) still exists: e.g. to evaluate the model."""
    from trainer.run.loop import train

    with tempfile.TemporaryDirectory(prefix="rl_studio_bench_run_") as run_dir:
        start = time.perf_counter()
        recorder = recorder_factory(start)
        result = train(config, Path(run_dir) / "run", sinks=[recorder], should_stop=recorder.should_stop)
        seconds = time.perf_counter() - start
        if on_result is not None:
            on_result(result)
    return recorder, seconds, int(result.step)


def steady_steps_per_second(metrics_events: list[dict]) -> float | None:
    """Steps per second between the first and the last update (leaves out setup and warm-up)."""
    if len(metrics_events) < 3:
        return None
    first, last = metrics_events[0], metrics_events[-1]
    seconds = last["elapsed"] - first["elapsed"]
    return (last["step"] - first["step"]) / seconds if seconds > 0 else None


def ours_throughput(
    config_path: str, settings: dict[str, Any], env_name: str, total_steps: int, device: str = "cpu", seed: int = 0
) -> dict[str, Any]:
    """Steps per second of `train` with these settings over `total_steps` (the whole call:
    env and network construction, every update, the final model written)."""
    overrides = settings_overrides(settings) + [
        f"env_name={env_name}",
        f"total_timesteps={total_steps}",
        f"device={device}",
        f"seed={seed}",
    ]
    config = _load(config_path, overrides)
    recorder, seconds, steps = _train(config, lambda start: MetricsRecorder("recent_return_mean", [], None, start))
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds,
        "steady_steps_per_second": steady_steps_per_second(recorder.metrics_events),
        "updates": len(recorder.metrics_events),
        "env_name": env_name,
    }


def ours_time_to_solve(
    config_path: str, target: float = 475.0, seed: int = 0, cap_seconds: float = 300.0, device: str = "cpu"
) -> dict[str, Any]:
    """The shipped config until the mean return of the last 100 episodes reaches `target`."""
    config = _load(config_path, [f"device={device}", f"seed={seed}"])
    recorder, seconds, steps = _train(
        config, lambda start: MetricsRecorder("recent_return_mean", [target], cap_seconds, start)
    )
    reached = recorder.reached.get(target)
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds,
        "solved": reached is not None,
        "solve_train_seconds": reached[0] if reached else None,
        "solve_unix_time": reached[1] if reached else None,
        "solve_step": reached[2] if reached else None,
        "solve_trainer_elapsed": reached[3] if reached else None,
        "series": recorder.series,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
    }


def ours_game(
    config_path: str, targets: list[float], cap_seconds: float, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    """A game's shipped config until the mean score of the last 100 episodes reaches every target
    (or `cap_seconds` of training pass)."""
    config = _load(config_path, [f"device={device}", f"seed={seed}"])
    recorder, seconds, steps = _train(
        config, lambda start: MetricsRecorder("recent_score_mean", list(targets), cap_seconds, start)
    )
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds,
        "targets": list(targets),
        "cap_seconds": cap_seconds,
        "env_name": config.env_name,
        "solve_train_seconds_by_target": {
            str(t): (recorder.reached[t][0] if t in recorder.reached else None) for t in targets
        },
        "solve_unix_times": {str(t): (recorder.reached[t][1] if t in recorder.reached else None) for t in targets},
        "solve_steps_by_target": {str(t): (recorder.reached[t][2] if t in recorder.reached else None) for t in targets},
        "best_score_mean": recorder.best,
        "series": recorder.series,
    }


def ours_ceiling(
    config_path: str, settings: dict[str, Any], device: str = "cpu", min_seconds: float = 3.0, seed: int = 0
) -> dict[str, Any]:
    """The update-only ceiling: the trainer's own update step (scoring the rollout with pi_old
    and V_old, bootstrap, GAE, PPO epochs) on random rollout data of the same shape, with no
    env stepping and no acting at all.

    It runs `TrainingSession.train_one_update`, the function the training loop calls, with the
    rollout collection replaced by a no-op over a buffer filled once with random data.
    """
    import torch

    import trainer.algos.ppo as ppo
    import trainer.run.loop as loop
    from trainer.run.events import EventBus

    config = _load(
        config_path,
        settings_overrides(settings)
        + ["env_name=cartpole", f"device={device}", f"seed={seed}", "total_timesteps=1000000000"],
    )
    with tempfile.TemporaryDirectory(prefix="rl_studio_bench_ceiling_") as run_dir:
        session = loop.TrainingSession(config, Path(run_dir), EventBus(), None)
        try:
            _fill_with_random_rollout(session.algorithm.buffer, session.policy, seed)
            original_collect = ppo.collect_rollout
            ppo.collect_rollout = lambda env, policy, buffer, next_obs, *rest: next_obs  # no env
            try:
                session.update = 1
                session.train_one_update()  # warm-up
                updates, start = 0, time.perf_counter()
                while True:
                    session.update = min(session.update + 1, session.num_updates)
                    session.train_one_update()
                    updates += 1
                    seconds = time.perf_counter() - start
                    if seconds >= min_seconds and updates >= 3:
                        break
                if session.device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
            finally:
                ppo.collect_rollout = original_collect
        finally:
            session.close()
    steps = updates * config.batch_size
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds,
        "updates": updates,
        "seconds_per_update": seconds / updates,
    }


def _fill_with_random_rollout(buffer, policy, seed: int) -> None:
    """Random observations, actions sampled by the policy, rewards of 1 and about one episode
    end in 50 steps: data shaped like a CartPole rollout. (pi_old and V_old are computed by the
    update itself, `score_rollout`, as in training.)"""
    import torch

    generator = torch.Generator(device=buffer.obs.device)
    generator.manual_seed(seed)
    device = buffer.obs.device
    sample = policy.sampler()
    buffer.obs.copy_(torch.randn(buffer.obs.shape, generator=generator, device=device) * 0.5)
    noise = sample.noise(buffer.obs.shape[0], buffer.obs.shape[1], generator, device)
    for obs, actions, step_noise in zip(buffer.obs.unbind(0), buffer.actions.unbind(0), noise.unbind(0)):
        actions.copy_(sample(obs, step_noise))
    buffer.rewards.fill_(1.0)
    buffer.terminated.copy_(torch.rand(buffer.terminated.shape, generator=generator, device=device) < 0.02)
    buffer.truncated.zero_()
    buffer.final_obs.copy_(buffer.obs)
