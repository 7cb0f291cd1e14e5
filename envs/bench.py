"""Environment speed benchmark: steps per second with random actions.

    python -m envs.bench                                   # CPU, num_envs 1 64 1024 16384
    python -m envs.bench --device cuda --num-envs 4096 16384 65536 --no-gym
    python benchmarks/envs.py ...                          # the same

For every native env and num_envs it times `env.step` on pre-generated random action batches
(so sampling actions is not part of the cost) and prints steps/s, with Gymnasium's
`SyncVectorEnv` CartPole and Gymnasium's own numpy-vectorised CartPole
(`gymnasium.make_vec("CartPole-v1", vectorization_mode="vector_entry_point")`) measured in the
same run, and the ratios (of medians). Each figure is the median of `--repeats` timed runs; the
fastest run is printed too, as the figure least disturbed by other work on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

DEFAULT_NUM_ENVS = [1, 64, 1024, 16384]
NATIVE_ENVS = ["cartpole", "flappy_bird", "snake"]
ACTION_BATCHES = 64  # distinct pre-generated action batches, cycled


@dataclass
class Measurement:
    env: str
    implementation: str
    num_envs: int
    steps_per_second: float  # median of the timed runs
    device: str
    best_steps_per_second: float = 0.0  # fastest timed run (least disturbed by other load)


def _time_loop(step_once, num_envs: int, seconds: float, repeats: int, synchronize) -> tuple[float, float]:
    """(median, best) steps/s over `repeats` runs of about `seconds` each (after a warm-up)."""
    for _ in range(10):
        step_once()
    synchronize()
    # Size a run from a short probe so the timer is read rarely.
    probe_start = time.perf_counter()
    for _ in range(10):
        step_once()
    synchronize()
    per_step = max((time.perf_counter() - probe_start) / 10, 1e-7)
    steps_per_run = max(5, int(seconds / per_step))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps_per_run):
            step_once()
        synchronize()
        rates.append(num_envs * steps_per_run / (time.perf_counter() - start))
    return statistics.median(rates), max(rates)


def measure_native(name: str, num_envs: int, device: str, seconds: float, repeats: int, **env_kwargs) -> Measurement:
    from envs import make_vec_env

    env = make_vec_env(name, num_envs, device=device, seed=0, **env_kwargs)
    env.reset()
    generator = torch.Generator(device=env.device).manual_seed(0)
    batches = [
        torch.randint(0, env.single_action_space.n, (num_envs,), generator=generator, device=env.device)
        for _ in range(ACTION_BATCHES)
    ]
    counter = [0]

    def step_once():
        env.step(batches[counter[0] % ACTION_BATCHES])
        counter[0] += 1

    synchronize = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    median, best = _time_loop(step_once, num_envs, seconds, repeats, synchronize)
    env.close()
    label = name + "".join(f" {key}={value}" for key, value in env_kwargs.items())
    return Measurement(label, "ours (torch)", num_envs, median, device, best)


def _measure_gymnasium_vector(vector_env, num_envs: int, seconds: float, repeats: int) -> tuple[float, float]:
    vector_env.reset(seed=0)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 2, num_envs) for _ in range(ACTION_BATCHES)]
    counter = [0]

    def step_once():
        vector_env.step(batches[counter[0] % ACTION_BATCHES])
        counter[0] += 1

    rates = _time_loop(step_once, num_envs, seconds, repeats, lambda: None)
    vector_env.close()
    return rates


def measure_gymnasium_sync(num_envs: int, seconds: float, repeats: int) -> Measurement:
    import gymnasium

    vector_env = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * num_envs)
    median, best = _measure_gymnasium_vector(vector_env, num_envs, seconds, repeats)
    return Measurement("cartpole", "Gymnasium SyncVectorEnv", num_envs, median, "cpu", best)


def measure_gymnasium_numpy(num_envs: int, seconds: float, repeats: int) -> Measurement:
    import gymnasium

    vector_env = gymnasium.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    median, best = _measure_gymnasium_vector(vector_env, num_envs, seconds, repeats)
    return Measurement("cartpole", "Gymnasium make_vec numpy", num_envs, median, "cpu", best)


def _format_rate(rate: float) -> str:
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k"
    return f"{rate:.0f}"


def format_table(measurements: list[Measurement]) -> str:
    """A markdown table: steps/s per env and num_envs, and ratios to the two Gymnasium baselines."""
    baseline = {
        (m.implementation, m.num_envs): m.steps_per_second
        for m in measurements
        if m.implementation.startswith("Gymnasium")
    }
    lines = [
        "| env | implementation | device | num_envs | steps/s (median) | best run | x SyncVectorEnv | x make_vec numpy |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for m in measurements:
        sync = baseline.get(("Gymnasium SyncVectorEnv", m.num_envs))
        numpy_vec = baseline.get(("Gymnasium make_vec numpy", m.num_envs))
        ratio_sync = f"{m.steps_per_second / sync:.1f}" if sync else "-"
        ratio_numpy = f"{m.steps_per_second / numpy_vec:.2f}" if numpy_vec else "-"
        lines.append(
            f"| {m.env} | {m.implementation} | {m.device} | {m.num_envs} | {_format_rate(m.steps_per_second)} "
            f"| {_format_rate(m.best_steps_per_second)} | {ratio_sync} | {ratio_numpy} |"
        )
    return "\n".join(lines)


def build_parser(prog: str = "python -m envs.bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", default="cpu", help="cpu, cuda or cuda:N (Gymnasium baselines always run on the CPU)"
    )
    parser.add_argument("--num-envs", type=int, nargs="+", default=DEFAULT_NUM_ENVS)
    parser.add_argument("--envs", nargs="+", default=NATIVE_ENVS, help="native envs to time")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure (the median is reported)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1: steadiest on a small shared machine)"
    )
    parser.add_argument("--no-gym", action="store_true", help="skip the Gymnasium baselines")
    parser.add_argument(
        "--gym-max-envs", type=int, default=16384, help="largest num_envs for the Gymnasium SyncVectorEnv baseline"
    )
    return parser


def run(args: argparse.Namespace) -> list[Measurement]:
    """Time every env and size `args` asks for, print each figure and the table; the measurements."""
    torch.set_num_threads(args.threads)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

    measurements: list[Measurement] = []
    for name in args.envs:
        for num_envs in args.num_envs:
            measurements.append(measure_native(name, num_envs, args.device, args.seconds, args.repeats))
            print(
                f"  {measurements[-1].env} {num_envs}: {_format_rate(measurements[-1].steps_per_second)} steps/s",
                flush=True,
            )
    if not args.no_gym:
        for num_envs in args.num_envs:
            if num_envs <= args.gym_max_envs:
                measurements.append(measure_gymnasium_sync(num_envs, args.seconds, args.repeats))
                print(
                    f"  Gymnasium SyncVectorEnv {num_envs}: {_format_rate(measurements[-1].steps_per_second)} steps/s",
                    flush=True,
                )
            measurements.append(measure_gymnasium_numpy(num_envs, args.seconds, args.repeats))
            print(
                f"  Gymnasium make_vec numpy {num_envs}: {_format_rate(measurements[-1].steps_per_second)} steps/s",
                flush=True,
            )

    device_name = (
        torch.cuda.get_device_name(torch.device(args.device))
        if args.device.startswith("cuda")
        else f"{os.cpu_count()} CPU cores"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nRandom-action steps/s, {device_name}, torch {torch.__version__}, {args.threads} torch thread(s), "
        f"median of {args.repeats} x {args.seconds}s; load average at the end: {load:.1f}\n"
    )
    print(format_table(measurements))
    return measurements


def main(argv: list[str] | None = None) -> int:
    """`python -m envs.bench`: the table (`python -m benchmarks.envs --json F` also writes the figures)."""
    run(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
