"""Actor-learner against synchronous PPO on this machine, on a slow Python env and on Flappy Bird:
steps/s, time to a score threshold, learning per env step, one member slowed 5x, and a simulated
scaling table to 16 / 64 members.

    python -m benchmarks.actor_learner                 # 10 runs, each to its threshold or 25 / 30 s of training (~6 min)
    python -m benchmarks.actor_learner --quick         # a smoke run: the slow env, 2 runs of 8 s of training
    python -m benchmarks --only actor_learner          # the same as the first, from the suite

Per env (`slow`: benchmarks/slow_env.py, CartPole physics and 300 us of busy Python per step, 16
envs x 32 steps per batch; `flappy`: configs/flappy_bird.yaml as shipped), five runs, each a fresh
`python -m trainer` in a temporary folder, one after another:
(a) `ppo, 1 process`; (b) `ppo, 2 ranks` (`--nproc 2`, today's synchronous cluster, gloo);
(c) `appo, 2 actors` (`--set algo=appo --actors 2`: a learner and two actor processes);
(b') and (c') the same with one rank / one actor slowed 5x: the benchmark stops that process
with SIGSTOP for 40 ms of every 50 ms (SIGCONT for 10 ms), from outside, for the whole run.

Each run ends at its threshold (recent return 200 on `slow`, recent score 5 pipes on `flappy`)
or `--seconds` after its first update (25 s on `slow`, 30 s on `flappy`; start-up, slow on a
loaded machine, is left out of the bound but counted in the time from launch). Steps/s are the
learner's steps learned from per training second (second to last update). The learning curve is the metric at fixed env steps; with one seed per run, the
gap between the two synchronous runs (a) and (b) stands for the noise. Then the per-batch costs
and the scaling model of benchmarks/actor_learner_sim.py. Results (JSON and the markdown) in
benchmarks/results/actor_learner.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import actor_learner_sim as sim
from benchmarks.actor_learner_report import report
from benchmarks.cluster import _metrics, steady_steps_per_second

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "actor_learner.json"
QUIET = ["--set", "gif_interval=0", "--set", "device=cpu", "--set", "log_interval=1000", "--quiet"]
POLL_SECONDS = 0.5
STARTUP_SECONDS = 90.0  # a run with no update this long after its launch is given up
STOPPED_SECONDS, RUNNING_SECONDS = 0.040, 0.010  # one 5x-slowed member: stopped 80% of each 50 ms
ENVS = {
    "slow": {
        "label": "SlowCartPole (CartPole physics + 300 us busy-wait per step, 16 envs x 32 steps)",
        "config": "configs/cartpole.yaml",
        "sets": [
            "env_name=benchmarks.slow_env:SlowCartPole",
            "num_envs=16",
            "num_steps=32",
            "mini_batch_size=128",
            "update_epochs=2",
        ],
        "flags": ["--allow-custom-envs"],
        "metric": "recent_return_mean",
        "threshold": 200.0,
        "seconds": 25.0,
    },
    "flappy": {
        "label": "Flappy Bird (native, configs/flappy_bird.yaml as shipped)",
        "config": "configs/flappy_bird.yaml",
        "sets": [],
        "flags": [],
        "metric": "recent_score_mean",
        "threshold": 5.0,
        "seconds": 30.0,
    },
}
CONTENDERS = {
    "a": ("ppo, 1 process", [], None),
    "b": ("ppo, 2 ranks", ["--nproc", "2", "--set", "backend=gloo"], None),
    "c": ("appo, 2 actors", ["--set", "algo=appo", "--actors", "2"], None),
    "b5": ("ppo, 2 ranks, 1 slowed 5x", ["--nproc", "2", "--set", "backend=gloo"], "rank"),
    "c5": ("appo, 2 actors, 1 slowed 5x", ["--set", "algo=appo", "--actors", "2"], "actor"),
}


def _family(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def slowed_member(pid: int, kind: str) -> int | None:
    """The process to slow: the rank with LOCAL_RANK 1 (`--nproc 2`), or the first actor spawned
    (`--actors 2` spawns its actors first, then the learner)."""
    import psutil

    found = []
    for child in _family(pid):
        try:
            if kind == "rank" and child.environ().get("LOCAL_RANK") == "1":
                found.append(child)
            elif kind == "actor" and child.ppid() == pid and "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    found.sort(key=lambda process: process.create_time())
    return found[0].pid if found else None


class DutyCycle(threading.Thread):
    """SIGSTOP / SIGCONT one process of a run: stopped 40 ms of every 50 ms (5x slower)."""

    def __init__(self, pid: int, kind: str):
        super().__init__(daemon=True)
        self.pid, self.kind, self.done, self.training = pid, kind, threading.Event(), threading.Event()
        self.target, self.stopped, self.since = None, 0.0, None

    def run(self) -> None:
        while not self.training.is_set() and not self.done.wait(0.2):
            pass  # start-up (imports, rendezvous) runs at full speed: the slow-down is of training
        while self.target is None and not self.done.is_set():
            self.target = slowed_member(self.pid, self.kind)
            self.done.wait(0 if self.target else 0.2)
        self.since = time.time()
        try:
            while self.target is not None and not self.done.is_set():
                os.kill(self.target, signal.SIGSTOP)
                started = time.perf_counter()
                self.done.wait(STOPPED_SECONDS)
                os.kill(self.target, signal.SIGCONT)
                self.stopped += time.perf_counter() - started
                self.done.wait(RUNNING_SECONDS)
        except ProcessLookupError:
            pass
        finally:
            if self.target is not None:
                try:
                    os.kill(self.target, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def figures(self) -> dict:
        held = time.time() - self.since if self.since else 0.0
        return {"pid": self.target, "stopped_share": self.stopped / held if held else None}


def _end_tree(process: subprocess.Popen) -> None:
    """SIGKILL to the run and every process it started (elastic ranks run in sessions of their own)."""
    import psutil

    for member in [*_family(process.pid), process]:
        try:
            os.kill(member.pid, signal.SIGCONT)
            member.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    process.wait()


def measure(env: dict, args: list[str], slow: str | None, seconds: float) -> tuple[dict, list[dict]]:
    """One run, ended at the env's threshold or `seconds` after its first update (start-up, at most
    STARTUP_SECONDS, does not count against them): its figures and its events."""
    from trainer.run.layout import events_path

    sets = [part for value in env["sets"] for part in ("--set", value)]
    with tempfile.TemporaryDirectory(prefix="rl-actor-learner-bench-") as folder:
        run_dir = Path(folder) / "run"
        command = [sys.executable, "-m", "trainer", "--config", env["config"], "--run-dir", str(run_dir)]
        command += [*env["flags"], *sets, *QUIET, *args]
        launched = time.time()
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        cycle = DutyCycle(process.pid, slow) if slow else None
        if cycle:
            cycle.start()
        events: list[dict] = []
        first = None
        try:
            deadline = launched + STARTUP_SECONDS
            while time.time() < deadline and process.poll() is None:
                time.sleep(POLL_SECONDS)
                events = _metrics(events_path(run_dir))
                if events and first is None:  # training began: its bound and the costs count from here
                    deadline = time.time() + seconds
                    first = (_cpu_seconds(process.pid), _actor_rows(run_dir), len(events))
                    if cycle:
                        cycle.training.set()
                if any((event.get(env["metric"]) or 0) >= env["threshold"] for event in events):
                    break
            events = _metrics(events_path(run_dir))
            actors = _actor_rows(run_dir)
            cpu = _cpu_seconds(process.pid)
        finally:
            if cycle:
                cycle.done.set()
                cycle.join()
            _end_tree(process)
        error = process.stderr.read().decode(errors="replace")[-2000:] if not events else ""
    run = summarise(events, launched, env, actors, seconds, error)
    run["slowed"] = cycle.figures() if cycle else None
    if first and actors and len(cpu) > len(actors) and len(first[0]) == len(cpu):
        # from the first update to the end: spawned actors first, the learner last
        run["learner_cpu_seconds"] = cpu[-1] - first[0][-1]
        run["learner_updates"] = len(events) - first[2]
        run["actors_cpu_seconds"] = sum(cpu[: len(actors)]) - sum(first[0][: len(actors)])
        run["actor_batches"] = sum(row.get("batches") or 0 for row in actors) - sum(
            row.get("batches") or 0 for row in first[1]
        )
    return run, events


def _cpu_seconds(pid: int) -> list[float]:
    """CPU seconds (user + system) of each process a run spawned (an actor-learner run's actors and
    learner), oldest first."""
    import psutil

    found = []
    for child in _family(pid):
        try:
            if child.ppid() == pid and "spawn_main" in " ".join(child.cmdline()):
                times = child.cpu_times()
                found.append((child.create_time(), times.user + times.system))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [seconds for _, seconds in sorted(found)]


def _actor_rows(run_dir: Path) -> list[dict]:
    from trainer.run.layout import nodes_path

    try:
        table = json.loads(nodes_path(run_dir).read_text())
    except (OSError, ValueError):
        return []
    return [row for row in table.get("nodes", []) if row.get("role") == "actor"]


def summarise(events: list[dict], launched: float, env: dict, actors: list[dict], bound: float, error="") -> dict:
    """A run's figures from its metrics events (and its actor rows)."""
    metric = env["metric"]
    hit = next((event for event in events if (event.get(metric) or 0) >= env["threshold"]), None)
    lags = [event["policy_lag"] for event in events if event.get("policy_lag") is not None]
    rates = [row["steps_per_second"] for row in actors if row.get("steps_per_second")]
    return {
        "updates": len(events),
        "steps": events[-1]["step"] if events else 0,
        "steps_per_second": steady_steps_per_second(events),
        "threshold": {
            "training_seconds": hit["elapsed"],
            "seconds_from_launch": hit["time"] - launched,
            "steps": hit["step"],
        }
        if hit
        else None,
        "best": max((event.get(metric) or 0 for event in events), default=None),
        "curve": [[event["step"], event.get(metric)] for event in events],
        "policy_lag_mean": sum(lags) / len(lags) if lags else None,
        "policy_lag_max": max(lags) if lags else None,
        "dropped_batches": events[-1].get("dropped_batches") if events else None,
        "actor_rates": rates or None,
        "bound_seconds": bound,
        "error": error,
    }


def run_actor_learner(
    envs: tuple[str, ...] = tuple(ENVS),
    contenders: tuple[str, ...] = tuple(CONTENDERS),
    seconds: float | None = None,
    out: Path | None = None,
    command: str = "python -m benchmarks.actor_learner",
    scaling: bool = True,
) -> dict:
    """Measure every env x contender, the per-batch costs and the scaling model; print the report,
    write the JSON and the markdown (into `out`, else benchmarks/results/)."""
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at the start", flush=True)
    results = {"command": command, "cores": os.cpu_count(), "load_at_start": load, "envs": {}}
    for key in envs:
        env = ENVS[key]
        entry = {"label": env["label"], "metric": env["metric"], "threshold": env["threshold"], "runs": {}}
        results["envs"][key] = entry
        appo_run = None
        for letter in contenders:
            name, args, slow = CONTENDERS[letter]
            run, events = measure(env, args, slow, seconds or env["seconds"])
            entry["runs"][letter] = {"name": name, **run}
            if run.get("actor_batches") and (appo_run is None or not slow):
                appo_run = run
            print(
                f"  {key} {name}: {run['steps_per_second'] or 0:,.0f} steps/s, best {run['best'] or 0:.1f}, "
                f"{run['updates']} updates" + (f"\n    no metrics; stderr: {run['error']}" if run["error"] else ""),
                flush=True,
            )
        if scaling and appo_run:
            entry["costs"] = sim.measure_costs(env["config"], env["sets"], appo_run)
    results["load_at_end"] = os.getloadavg()[0]
    text = "\n".join(report(results))
    print("\n" + text)
    from trainer.run.files import atomic_write

    path = (out / RESULTS.name) if out is not None else RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(results, indent=1))
    atomic_write(path.with_suffix(".md"), text + "\n")
    print(f"\nwritten: {path} and {path.with_suffix('.md').name}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.actor_learner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(ENVS), help=f"envs to run, of {', '.join(ENVS)} (default all)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="seconds of training per run at most (default 25 on slow, 30 on flappy)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: the slow env, (a) and (c'), 8 s of training each"
    )
    args = parser.parse_args(argv)
    command = "python -m benchmarks.actor_learner " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.quick:
        out = Path(tempfile.gettempdir()) / "rl-actor-learner-quick"  # a smoke run keeps the results as they are
        run_actor_learner(("slow",), ("a", "c5"), 8.0, out, command.strip())
    else:
        envs = tuple(name.strip() for name in args.envs.split(","))
        run_actor_learner(envs, tuple(CONTENDERS), args.seconds, command=command.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
