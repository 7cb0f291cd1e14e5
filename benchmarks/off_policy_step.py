"""The cost of one update of our DQN and SAC against SB3's `train()`, at the same settings.

    python -m benchmarks.off_policy_step                  both tasks, 7 interleaved rounds
    python -m benchmarks.off_policy_step --only sac --rounds 11 --updates 40

On a small CPU an off-policy run spends most of its time in gradient steps of small MLPs, so
this is the figure behind the off_policy section's steps/s. For each task (the configs of the
off_policy section, with what SB3 lacks turned off on our side: `off_policy.SB3_HAS_NONE`) both
sides fill their replay buffer with `learning_starts` + `--fill` env steps, then one process
times `--updates` updates of each side in turn, `--rounds` times, the side that goes first
alternating: a shared, noisy machine slows both sides alike within a round. One update is
`gradient_steps` gradient steps of `mini_batch_size` transitions on both sides (ours:
`algorithm.update`, SB3: `model.train(gradient_steps, batch_size)`). Printed: ms per gradient
step (min and median over rounds, and the spread (max - min) / median), and SB3 / ours of the
medians and of the minima (above 1: ours cheaper).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.off_policy import SB3_HAS_NONE, TASKS, Task, shared_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
STEP_TASKS = {task.algo: task for task in TASKS if not task.long}  # dqn: CartPole, sac: Pendulum


def ours_update(task: Task, fill: int, seed: int) -> tuple[Callable[[], None], int, Callable[[], None]]:
    """Our algorithm on the task's config with a filled buffer: (one update, gradient steps per
    update, close)."""
    from trainer.algos.base import Progress
    from trainer.config.defaults import load_config
    from trainer.run.events import EventBus
    from trainer.run.loop import TrainingSession

    overrides = SB3_HAS_NONE[task.algo] + ["device=cpu", "gif_interval=0", f"seed={seed}"]
    config = load_config(REPO_ROOT / "configs" / task.config, overrides)
    session = TrainingSession(config, None, EventBus())
    algorithm, obs, step, update = session.algorithm, session.next_obs, 0, 0
    while step < config.learning_starts + fill:
        update += 1
        obs = algorithm.collect(obs, Progress(update, 10**6, step, config.learning_rate))
        step += algorithm.steps_per_update
    progress = Progress(update, 10**6, step, config.learning_rate)
    return (lambda: algorithm.update(progress)), config.gradient_steps, session.close


def sb3_update(task: Task, fill: int, seed: int) -> tuple[Callable[[], None], int, Callable[[], None]]:
    """SB3's algorithm at the same settings with a filled buffer: (one `train()`, gradient steps, close)."""
    from stable_baselines3 import DQN, SAC

    from benchmarks.sb3_off_policy import _make_env, sb3_kwargs

    settings = shared_settings(REPO_ROOT / "configs" / task.config, task.algo, SB3_HAS_NONE[task.algo])
    env = _make_env(task.env_id, settings, seed)
    kwargs = sb3_kwargs(task.algo, settings, seed)
    kwargs["learning_starts"] = int(settings["learning_starts"]) + fill  # fill only: no training yet
    model = {"dqn": DQN, "sac": SAC}[task.algo]("MlpPolicy", env, **kwargs)
    model.learn(total_timesteps=kwargs["learning_starts"])
    gradient_steps, batch_size = int(settings["gradient_steps"]), int(settings["mini_batch_size"])
    return (lambda: model.train(gradient_steps, batch_size)), gradient_steps, env.close


def interleaved(sides: dict[str, Callable[[], None]], rounds: int, updates: int, warmup: int) -> dict[str, list]:
    """Seconds per update of each side, one figure per round, the first side alternating."""
    for run in sides.values():
        for _ in range(warmup):
            run()
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            for _ in range(updates):
                sides[name]()
            seconds[name].append((time.perf_counter() - start) / updates)
    return seconds


def measure(algo: str, rounds: int, updates: int, fill: int, seed: int = 0) -> dict:
    task = STEP_TASKS[algo]
    ours, ours_steps, close_ours = ours_update(task, fill, seed)
    sb3, sb3_steps, close_sb3 = sb3_update(task, fill, seed)
    assert ours_steps == sb3_steps, (ours_steps, sb3_steps)
    try:
        seconds = interleaved({"ours": ours, "sb3": sb3}, rounds, updates, warmup=max(3, updates // 4))
    finally:
        close_ours()
        close_sb3()
    per_step = {name: sorted(value * 1e3 / ours_steps for value in values) for name, values in seconds.items()}
    out = {"task": task.label, "config": task.config, "gradient_steps": ours_steps, "rounds": rounds}
    for name, values in per_step.items():
        median = statistics.median(values)
        out[name] = {"min_ms": values[0], "median_ms": median, "spread": (values[-1] - values[0]) / median}
    out["ratio_median"] = out["sb3"]["median_ms"] / out["ours"]["median_ms"]
    out["ratio_min"] = out["sb3"]["min_ms"] / out["ours"]["min_ms"]
    return out


def report_line(result: dict) -> str:
    ours, sb3 = result["ours"], result["sb3"]
    return (
        f"{result['task']} ({result['config']}, {result['gradient_steps']} gradient steps per update, "
        f"{result['rounds']} rounds): ms per gradient step, min / median (spread)\n"
        f"  ours {ours['min_ms']:.3f} / {ours['median_ms']:.3f} ({ours['spread']:.0%})   "
        f"SB3 {sb3['min_ms']:.3f} / {sb3['median_ms']:.3f} ({sb3['spread']:.0%})   "
        f"SB3 / ours: {result['ratio_median']:.2f}x of medians, {result['ratio_min']:.2f}x of minima"
    )


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="sac,dqn", help="comma-separated: sac (Pendulum), dqn (CartPole)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per task (default 7)")
    parser.add_argument("--updates", type=int, default=20, help="updates timed per side and round (default 20)")
    parser.add_argument("--fill", type=int, default=2000, help="env steps past learning_starts in the buffers")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the suite's default: 1)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    results = []
    for algo in (name.strip() for name in args.only.split(",") if name.strip()):
        if algo not in STEP_TASKS:
            parser.error(f"unknown task {algo!r}; choose from {', '.join(STEP_TASKS)}")
        results.append(measure(algo, args.rounds, args.updates, args.fill))
        print(report_line(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    main()
