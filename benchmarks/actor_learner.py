"""Actor-learner against synchronous PPO on this machine: the learner's steps/s, time to a return
threshold and the policy lag, for the same env and the same settings, side by side.

    python -m benchmarks.actor_learner                   # 4 runs, each to return 475 or 70 s (~3 minutes)
    python -m benchmarks.actor_learner --algo impala --seconds 60

Four contenders train `--config` (default configs/cartpole.yaml, as shipped: 128 envs x 32 steps
per batch) in a fresh process each, one after another, in a temporary folder:

- `ppo`: `python -m trainer --config X` (one process, the peer every ratio is against);
- `ppo, 2 ranks`: `--nproc 2`, today's synchronous cluster (gloo on the CPU);
- `appo, 1 actor` / `appo, 2 actors`: `--set algo=appo --actors N`, a learner and N actor
  processes (trainer/cluster/learner.py), each actor playing the config's envs.

Each run ends when its recent return (mean of the last 100 episodes) reaches the highest
threshold, at the config's total_timesteps, or after `--seconds` of wall time. From its metrics.jsonl: the learner's steps/s from
the second to the last update (training seconds, so start-up does not count); the training
seconds and the seconds from launch (start-up included: an actor-learner run starts three
processes) to each threshold; the policy lag (learner updates between the weights an actor
played and the update that learned from its batch: mean and max over the updates) and the
batches dropped; the actors' own steps/s from nodes.json. Ratios are against `ppo` of the same
invocation: on a shared machine only figures of one run compare. Results in
benchmarks/results/actor_learner.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.cluster import _metrics, steady_steps_per_second

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "actor_learner.json"
THRESHOLDS = (200.0, 475.0)
QUIET = ["--set", "gif_interval=0", "--set", "device=cpu", "--set", "log_interval=1000", "--quiet"]
POLL_SECONDS = 0.5


def contenders(algo: str) -> list[tuple[str, list[str]]]:
    """(name, trainer arguments) of each run, the peer first: the config's own settings, its
    total_timesteps and learning-rate schedule included, for every one."""
    return [
        ("ppo", []),
        ("ppo, 2 ranks", ["--nproc", "2", "--set", "backend=gloo"]),
        (f"{algo}, 1 actor", ["--set", f"algo={algo}", "--actors", "1"]),
        (f"{algo}, 2 actors", ["--set", f"algo={algo}", "--actors", "2"]),
    ]


def _end_tree(process: subprocess.Popen) -> None:
    """SIGKILL to the run and every process it started (elastic ranks run in sessions of their own)."""
    import psutil

    try:
        parent = psutil.Process(process.pid)
        family = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait()


def measure(config: str, args: list[str], seconds: float, thresholds: tuple[float, ...]) -> dict:
    """One run, ended at the highest threshold or after `seconds`: its figures."""
    from trainer.run.layout import events_path

    top = max(thresholds)
    with tempfile.TemporaryDirectory(prefix="rl-actor-learner-bench-") as folder:
        run_dir = Path(folder) / "run"
        command = [sys.executable, "-m", "trainer", "--config", config, "--run-dir", str(run_dir), *QUIET, *args]
        launched = time.time()
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        events: list[dict] = []
        try:
            while time.time() - launched < seconds and process.poll() is None:
                time.sleep(POLL_SECONDS)
                events = _metrics(events_path(run_dir))
                if any((event.get("recent_return_mean") or 0) >= top for event in events):
                    break
            events = _metrics(events_path(run_dir))
            nodes = _actor_rows(run_dir)
        finally:
            _end_tree(process)
        error = process.stderr.read().decode(errors="replace")[-2000:] if not events else ""
    return summarise(events, launched, thresholds, nodes, seconds, error)


def _actor_rows(run_dir: Path) -> list[dict]:
    try:
        table = json.loads((run_dir / "nodes.json").read_text())
    except (OSError, ValueError):
        return []
    return [row for row in table.get("nodes", []) if row.get("role") == "actor"]


def summarise(
    events: list[dict], launched: float, thresholds: tuple[float, ...], actors: list[dict], bound: float, error=""
) -> dict:
    """A run's figures from its metrics events (and its actor rows)."""
    reached = {}
    for threshold in thresholds:
        hit = next((event for event in events if (event.get("recent_return_mean") or 0) >= threshold), None)
        reached[str(threshold)] = (
            {"training_seconds": hit["elapsed"], "seconds_from_launch": hit["time"] - launched, "steps": hit["step"]}
            if hit
            else None
        )
    lags = [event["policy_lag"] for event in events if event.get("policy_lag") is not None]
    actor_rates = [row["steps_per_second"] for row in actors if row.get("steps_per_second")]
    return {
        "updates": len(events),
        "steps": events[-1]["step"] if events else 0,
        "steps_per_second": steady_steps_per_second(events),
        "thresholds": reached,
        "best_recent_return": max((event.get("recent_return_mean") or 0 for event in events), default=None),
        "policy_lag_mean": sum(lags) / len(lags) if lags else None,
        "policy_lag_max": max(lags) if lags else None,
        "dropped_batches": events[-1].get("dropped_batches") if events else None,
        "actor_steps_per_second": sum(actor_rates) if actor_rates else None,
        "bound_seconds": bound,
        "error": error,
    }


def _number(value, digits: int = 0, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def _ratio(value, peer, invert: bool = False) -> str:
    if not value or not peer:
        return ""
    return f" ({(peer / value if invert else value / peer):.2f}x)"


def table(results: dict) -> list[str]:
    """The markdown table: one column per contender, ratios against the first (the peer)."""
    names = list(results["runs"])
    peer = results["runs"][names[0]]
    lines = [
        f"| {results['config']}, {results['cores']} cores (load {results['load_at_start']:.1f}) | "
        + " | ".join(names)
        + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    row = [
        _number(run["steps_per_second"]) + _ratio(run["steps_per_second"], peer["steps_per_second"])
        for run in results["runs"].values()
    ]
    lines.append("| learner steps/s (training seconds) | " + " | ".join(row) + " |")
    for threshold in results["thresholds"]:
        key = str(threshold)
        cells = []
        for run in results["runs"].values():
            hit, peer_hit = run["thresholds"][key], peer["thresholds"][key]
            if hit is None:
                cells.append(
                    f"not reached: best {_number(run['best_recent_return'])} in {run['steps'] / 1e3:,.0f} k steps "
                    f"(bound {run['bound_seconds']:.0f} s)"
                )
                continue
            ratio = _ratio(hit["seconds_from_launch"], peer_hit and peer_hit["seconds_from_launch"], invert=True)
            cells.append(
                f"{hit['training_seconds']:.1f} s / {hit['seconds_from_launch']:.1f} s{ratio}, "
                f"{hit['steps'] / 1e3:,.0f} k steps"
            )
        lines.append(
            f"| return {threshold:.0f}: training s / s from launch (speed-up), steps | " + " | ".join(cells) + " |"
        )
    lag = [
        "-" if run["policy_lag_mean"] is None else f"{run['policy_lag_mean']:.2f} / {run['policy_lag_max']}"
        for run in results["runs"].values()
    ]
    lines.append("| policy lag, mean / max (updates) | " + " | ".join(lag) + " |")
    lines.append(
        "| batches dropped | " + " | ".join(_number(run["dropped_batches"]) for run in results["runs"].values()) + " |"
    )
    lines.append(
        "| actors' steps/s (their own, summed) | "
        + " | ".join(_number(run["actor_steps_per_second"]) for run in results["runs"].values())
        + " |"
    )
    return lines


def run_actor_learner(
    config: str = "configs/cartpole.yaml",
    algo: str = "appo",
    seconds: float = 70.0,
    thresholds: tuple[float, ...] = THRESHOLDS,
    out: Path | None = None,
    command: str = "python -m benchmarks.actor_learner",
) -> dict:
    """Measure every contender, print the table, write the JSON (into `out`, else benchmarks/results/)."""
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at the start", flush=True)
    results = {
        "command": command,
        "config": config,
        "algo": algo,
        "cores": os.cpu_count(),
        "load_at_start": load,
        "thresholds": list(thresholds),
        "runs": {},
    }
    for name, args in contenders(algo):
        run = measure(config, args, seconds, thresholds)
        results["runs"][name] = run
        print(
            f"  {name}: {_number(run['steps_per_second'])} steps/s, best recent return "
            f"{_number(run['best_recent_return'])}, {run['updates']} updates"
            + (f"\n    no metrics; stderr: {run['error']}" if run["error"] else ""),
            flush=True,
        )
    results["load_at_end"] = os.getloadavg()[0]
    print()
    print("\n".join(table(results)))
    from trainer.run.files import atomic_write

    path = (out / RESULTS.name) if out is not None else RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(results, indent=1))
    print(f"\nwritten: {path}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.actor_learner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/cartpole.yaml", help="the env and settings of every run")
    parser.add_argument("--algo", choices=("appo", "impala"), default="appo", help="the actor-learner algorithm")
    parser.add_argument("--seconds", type=float, default=70.0, help="wall seconds per run at most (default 70)")
    parser.add_argument(
        "--thresholds",
        default=",".join(f"{value:g}" for value in THRESHOLDS),
        help="recent-return thresholds to time; a run ends at the highest (default 200,475)",
    )
    args = parser.parse_args(argv)
    command = "python -m benchmarks.actor_learner " + " ".join(sys.argv[1:] if argv is None else argv)
    thresholds = tuple(sorted(float(value) for value in args.thresholds.split(",")))
    run_actor_learner(args.config, args.algo, args.seconds, thresholds, command=command.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
