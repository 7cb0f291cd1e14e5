"""Scaling out on this machine: steps/s for 1, 2 and 4 processes, the all-reduce time of one
gradient step, time to 50 pipes on Flappy Bird for 1 vs 2 processes, and a scaling model on
paper for N GPUs.

    python -m benchmarks.cluster                       # the README table (up to 20 minutes on 2 cores)
    python -m benchmarks.cluster --skip-flappy --seconds 20   # a quick look

Every run is `python -m trainer --config configs/<game>.yaml --nproc N` (torch's elastic
launcher, gloo ranks on the CPU) in a temporary folder; steps/s are read from its metrics.jsonl
between the second and the last update (training seconds, so process start-up does not count).
The all-reduce is timed on the real gradient vector (the flat gradient of the config's network)
in 2 and 4 gloo processes over loopback. The model: one update of one rank takes T1 seconds
(measured, 1 process) and g gradient steps, each followed by one all-reduce of a(N) seconds, so
N ranks on N devices give speedup(N) = N * T1 / (T1 + g * a(N)); the table evaluates it with the
all-reduce measured here and with the guide's 10 ms between nodes. On a machine with fewer
cores than processes the measured steps/s cannot scale (ranks share the cores): that is what
the model is for.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainer.run.layout import events_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cluster.json"
QUIET = ["--set", "gif_interval=0", "--set", "device=cpu", "--set", "backend=gloo", "--set", "log_interval=1000"]


def _metrics(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        if event.get("type") == "metrics":
            events.append(event)
    return events


def train_until(config: str, nproc: int, seconds: float, stop=None, extra: list[str] = ()) -> list[dict]:
    """Run the trainer with `nproc` ranks for at most `seconds` of wall time (or until `stop(events)`),
    then end it (its whole process group); returns its metrics events."""
    with tempfile.TemporaryDirectory(prefix="rl-cluster-bench-") as folder:
        run_dir = Path(folder) / "run"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainer",
                "--config",
                config,
                "--nproc",
                str(nproc),
                "--run-dir",
                str(run_dir),
                "--quiet",
                *QUIET,
                *extra,
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.time() + seconds
        events: list[dict] = []
        try:
            while time.time() < deadline and process.poll() is None:
                time.sleep(1.0)
                events = _metrics(events_path(run_dir))
                if stop is not None and stop(events):
                    break
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return _metrics(events_path(run_dir))


def steady_steps_per_second(events: list[dict]) -> float | None:
    """Steps per training second from the second to the last update (the first pays for warm-up)."""
    if len(events) < 3:
        return None
    first, last = events[1], events[-1]
    return (last["step"] - first["step"]) / max(1e-9, last["elapsed"] - first["elapsed"])


# ---------------------------------------------------------------------------------------------
# All-reduce of one gradient step, and the compute of one update


def _flat_gradient_size(config_path: str) -> tuple[int, int, int]:
    """(parameters of the config's network, gradient steps per update, samples per update)."""
    from trainer.config.defaults import load_config
    from trainer.nets.build import build_policy
    from trainer.run.setup import make_training_env, policy_spec

    config = load_config(config_path, ["device=cpu"])
    env = make_training_env(config, 1, "cpu", 0)
    try:
        policy = build_policy(policy_spec(config, env))
    finally:
        env.close()
    steps = config.update_epochs * (config.batch_size // config.mini_batch_size)
    return sum(parameter.numel() for parameter in policy.parameters()), steps, config.batch_size


def _all_reduce_rank(rank: int, world_size: int, port: int, numel: int, repeats: int, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    tensor = torch.randn(numel)
    times = []
    for index in range(repeats + 10):
        dist.barrier()
        started = time.perf_counter()
        dist.all_reduce(tensor)
        tensor.div_(world_size)
        if index >= 10:
            times.append(time.perf_counter() - started)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def all_reduce_seconds(numel: int, world_size: int, repeats: int = 300) -> float:
    """Median seconds of one all-reduce (plus the division that averages) of `numel` floats."""
    import torch.multiprocessing as mp

    from trainer.cluster.launch import free_port

    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "times.json")
        mp.start_processes(
            _all_reduce_rank,
            args=(world_size, free_port(), numel, repeats, out),
            nprocs=world_size,
            join=True,
            start_method="spawn",
        )
        return statistics.median(json.loads(Path(out).read_text()))


# ---------------------------------------------------------------------------------------------
# The table


def scaling_model(update_seconds: float, gradient_steps: int, all_reduce: float, n: int) -> float:
    return n * update_seconds / (update_seconds + gradient_steps * all_reduce)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="wall seconds per steps/s run (default 60)")
    parser.add_argument(
        "--flappy-seconds", type=float, default=420, help="wall-clock bound per time-to-50-pipes run (default 420)"
    )
    parser.add_argument("--skip-flappy", action="store_true")
    parser.add_argument("--config", default="configs/cartpole.yaml", help="config for steps/s (default cartpole)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    print(
        f"machine: {os.cpu_count()} cores, load average {load:.1f} at the start (shared machine: figures are "
        f"under that load)"
    )
    results: dict = {"cores": os.cpu_count(), "load_at_start": load, "config": args.config}

    rows = []
    for nproc in (1, 2, 4):
        fps = steady_steps_per_second(
            train_until(args.config, nproc, args.seconds, extra=["--set", "total_timesteps=100_000_000"])
        )
        rows.append((nproc, fps))
        print(f"  {nproc} process(es): {fps or float('nan'):,.0f} steps/s", flush=True)
    results["steps_per_second"] = {str(n): fps for n, fps in rows}

    numel, gradient_steps, batch = _flat_gradient_size(args.config)
    reduce = {n: all_reduce_seconds(numel, n) for n in (2, 4)}
    results["all_reduce_seconds"] = {str(n): value for n, value in reduce.items()}
    results["gradient"] = {"parameters": numel, "gradient_steps_per_update": gradient_steps, "batch": batch}
    one = rows[0][1]
    update_seconds = batch / one if one else float("nan")
    results["update_seconds_1_process"] = update_seconds

    if not args.skip_flappy:
        flappy = {}
        for nproc in (1, 2):
            events = train_until(
                "configs/flappy_bird.yaml",
                nproc,
                args.flappy_seconds,
                stop=lambda found: any((e.get("recent_score_mean") or 0) >= 50 for e in found),
            )
            hit = next((e for e in events if (e.get("recent_score_mean") or 0) >= 50), None)
            best = max(((e.get("recent_score_mean") or 0) for e in events), default=0)
            flappy[str(nproc)] = {
                "seconds": hit["elapsed"] if hit else None,
                "steps": hit["step"] if hit else None,
                "best_mean_score": best,
                "bound_seconds": args.flappy_seconds,
            }
            print(
                f"  flappy bird, {nproc} process(es): "
                + (
                    f"50 pipes after {hit['elapsed']:.1f} training s, {hit['step']:,} steps"
                    if hit
                    else f"not 50 pipes within {args.flappy_seconds:.0f} s wall (best mean {best:.1f})"
                ),
                flush=True,
            )
        results["flappy_50_pipes"] = flappy

    print()
    print(
        f"| {args.config}, gloo on {os.cpu_count()} CPU cores (load {load:.1f}) | 1 process | 2 processes "
        f"| 4 processes |"
    )
    print("|---|---|---|---|")
    print("| steps/s (training seconds) | " + " | ".join(f"{fps:,.0f}" if fps else "n/a" for _, fps in rows) + " |")
    print(
        f"| all-reduce of one gradient step ({numel:,} floats, loopback), median | - | "
        f"{reduce[2] * 1e3:.3f} ms | {reduce[4] * 1e3:.3f} ms |"
    )
    print(
        f"| all-reduce per update ({gradient_steps} gradient steps) vs one update's compute "
        f"({update_seconds * 1e3:.0f} ms) | - | {gradient_steps * reduce[2] * 1e3:.1f} ms "
        f"| {gradient_steps * reduce[4] * 1e3:.1f} ms |"
    )
    if "flappy_50_pipes" in results:
        cells = []
        for nproc in ("1", "2"):
            item = results["flappy_50_pipes"][nproc]
            reached = item["seconds"] is not None
            cells.append(
                f"{item['seconds']:.1f} s ({item['steps'] / 1e6:.2f} M steps)"
                if reached
                else f"not within {item['bound_seconds']:.0f} s (best {item['best_mean_score']:.1f})"
            )
        print(f"| Flappy Bird: training seconds to a mean score of 50 pipes | {cells[0]} | {cells[1]} | |")
    print()
    print(
        "Scaling model, one rank per GPU: speedup(N) = N T1 / (T1 + g a(N)), T1 = one rank's update "
        f"({update_seconds * 1e3:.0f} ms measured, 1 process), g = {gradient_steps}"
    )
    print("| N | a = measured loopback (4-process value) | a = 1 ms | a = 10 ms (the guide's bound between nodes) |")
    print("|---|---|---|---|")
    model = {}
    for n in (1, 2, 4, 8, 16):
        cells = [
            scaling_model(update_seconds, gradient_steps, 0.0 if n == 1 else value, n)
            for value in (reduce[4], 1e-3, 10e-3)
        ]
        model[str(n)] = cells
        print(f"| {n} | " + " | ".join(f"{cell:.2f}x" for cell in cells) + " |")
    results["model_speedup"] = model
    from trainer.run.files import atomic_write

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(RESULTS, json.dumps(results, indent=1))
    print(f"\nwritten: {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
