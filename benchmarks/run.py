"""The benchmark suite, one command: `python -m benchmarks` (or `python benchmarks/run.py`).

    python -m benchmarks                 throughput, ceiling, time to solve, scaling (~5 min)
    python -m benchmarks --quick         the same with small budgets (~1-2 min), figures rough
    python -m benchmarks --games         + Flappy Bird and Snake to their score targets (section game_targets)
    python -m benchmarks --only games    every shipped game config for its budget, greedy games after
                                         (benchmarks/games.py; long: --quick checks it runs)
    python -m benchmarks --only throughput,solve
    python -m benchmarks --only off_policy   DQN and SAC against SB3's (benchmarks/off_policy.py; long)
    python -m benchmarks --only studio_latency   cold start, idle CPU, Start to first picture (~3 min)
    python -m benchmarks --only actor_learner    1 process / 2 ranks / learner + 2 actors, one member 5x slow, scaling model (~6 min)

Every measurement runs in a fresh Python process (`benchmarks.contender`) with the same torch
thread count, so none inherits another's warm caches and "seconds from launch" is honest. The
table is printed and written with PNG plots to benchmarks/results/.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python benchmarks/run.py` puts benchmarks/ first on the path, where benchmarks/envs.py would
# shadow the `envs` package: put the repository root there instead.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO_ROOT / "benchmarks"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import report  # noqa: E402
from benchmarks.options import parse_args  # noqa: E402
from benchmarks.sb3_peer import NET_ARCH, RL_ZOO_CARTPOLE  # noqa: E402

SOLVE_TARGET = 475.0
FLAPPY_TARGETS = (20.0, 50.0, 100.0)
SNAKE_TARGETS = (10.0, 20.0)
# game_targets: the shipped configs timed to their targets, by config file.
TARGET_CONFIGS = (("flappy_bird", FLAPPY_TARGETS), ("flappy_bird_1000", FLAPPY_TARGETS), ("snake", SNAKE_TARGETS))


def run_in_fresh_process(kind: str, params: dict[str, Any], threads: int, timeout: float) -> dict[str, Any]:
    """Run one measurement in a new Python process; its result dict, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="rl_studio_bench_") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        env = dict(
            os.environ,
            OMP_NUM_THREADS=str(threads),
            MKL_NUM_THREADS=str(threads),
            SDL_VIDEODRIVER="dummy",
            PYGAME_HIDE_SUPPORT_PROMPT="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        )
        launched_at = time.time()  # from here on counts as "since launch"
        spec_path.write_text(
            json.dumps({"kind": kind, "params": params, "threads": threads, "launched_at": launched_at})
        )
        try:
            completed = subprocess.run(
                [sys.executable, "-m", "benchmarks.contender", str(spec_path), str(result_path)],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"{kind} did not finish within {timeout:.0f} s"}
        if completed.returncode != 0 or not result_path.exists():
            tail = (completed.stderr or completed.stdout or "").strip()[-2000:]
            return {"error": f"{kind} exited with {completed.returncode}: {tail}"}
        result = json.loads(result_path.read_text())
        result["process_seconds"] = time.time() - launched_at
        return result


def _say(message: str) -> None:
    print(message, flush=True)


def _rate_text(result: dict) -> str:
    if "error" in result:
        return report.failed_text(result)
    return f"{result['steps_per_second']:,.0f} steps/s ({result['train_seconds']:.1f} s)"


def zoo_settings() -> dict[str, Any]:
    return {
        "num_envs": RL_ZOO_CARTPOLE["n_envs"],
        "num_steps": RL_ZOO_CARTPOLE["n_steps"],
        "epochs": RL_ZOO_CARTPOLE["n_epochs"],
        "minibatch_size": RL_ZOO_CARTPOLE["batch_size"],
        "hidden_sizes": list(NET_ARCH),
    }


def best_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of repeated measurements (the machine's capacity; slower repeats were
    slowed by something else on the machine), with every repeat's figure kept beside it."""
    ok = [result for result in results if "error" not in result]
    if not ok:
        return results[-1]
    best = dict(max(ok, key=lambda result: result["steps_per_second"]))
    best["repeats_steps_per_second"] = [result.get("steps_per_second") for result in results]
    return best


def run_throughput(args, shipped: dict[str, Any]) -> dict[str, Any]:
    """SB3, ours native and ours through the Gymnasium adapter, at identical settings, in turn
    (with --repeats, round after round, so that load from elsewhere hits all of them alike)."""
    profiles = {"rl_zoo": zoo_settings(), "shipped": shipped}
    contenders = [
        ("sb3", "SB3", None),
        ("ours_native", "ours, native", "cartpole"),
        ("ours_gym", "ours, Gymnasium adapter", "gym:CartPole-v1"),
    ]
    measured: dict[tuple[str, str], list[dict]] = {}
    for round_index in range(args.repeats):
        for name, settings in profiles.items():
            for key, label, env_name in contenders:
                if key == "sb3":
                    params = {
                        "total_steps": args.throughput_steps,
                        **{field: settings[field] for field in ("num_envs", "num_steps", "minibatch_size", "epochs")},
                    }
                    result = run_in_fresh_process("sb3_throughput", params, args.threads, 1800.0)
                else:
                    params = {
                        "config_path": str(args.configs / "cartpole.yaml"),
                        "settings": settings,
                        "env_name": env_name,
                        "total_steps": args.throughput_steps,
                        "device": args.device,
                    }
                    result = run_in_fresh_process("ours_throughput", params, args.threads, 1800.0)
                measured.setdefault((name, key), []).append(result)
                _say(
                    f"[throughput] {name} settings, {label}: {_rate_text(result)}"
                    + (f" (round {round_index + 1}/{args.repeats})" if args.repeats > 1 else "")
                )
    out: dict[str, Any] = {"total_steps": args.throughput_steps, "repeats": args.repeats, "profiles": {}}
    for name, settings in profiles.items():
        out["profiles"][name] = {
            "settings": settings,
            **{key: best_of(measured[(name, key)]) for key, _, _ in contenders},
        }
    return out


def run_ceiling(args, shipped: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, settings in (("rl_zoo", zoo_settings()), ("shipped", shipped)):
        params = {
            "config_path": str(args.configs / "cartpole.yaml"),
            "settings": settings,
            "device": args.device,
            "min_seconds": args.ceiling_seconds,
        }
        out[name] = best_of(
            [run_in_fresh_process("ours_ceiling", params, args.threads, 600.0) for _ in range(args.repeats)]
        )
        _say(f"[ceiling] {name}: {_rate_text(out[name])}")
    return out


def run_solve(args) -> dict[str, Any]:
    out: dict[str, Any] = {"target": SOLVE_TARGET, "sb3": [], "ours": []}
    for seed in range(args.seeds):
        result = run_in_fresh_process("sb3_time_to_solve", {"seed": seed, "target": SOLVE_TARGET}, args.threads, 900.0)
        out["sb3"].append(result)
        _say(f"[solve] SB3 seed {seed}: {_solve_text(result)}")
        result = run_in_fresh_process(
            "ours_time_to_solve",
            {
                "config_path": str(args.configs / "cartpole.yaml"),
                "seed": seed,
                "target": SOLVE_TARGET,
                "cap_seconds": 30.0 if args.quick else 300.0,
                "device": args.device,
            },
            args.threads,
            900.0,
        )
        out["ours"].append(result)
        _say(f"[solve] ours seed {seed}: {_solve_text(result)}")
    return out


def _solve_text(result: dict) -> str:
    if "error" in result:
        return report.failed_text(result)
    if not result.get("solved"):
        return f"not solved in {result['train_seconds']:.1f} s ({result['steps']} steps)"
    return (
        f"solved after {result['solve_train_seconds']:.2f} s of training, "
        f"{result.get('solve_since_launch', float('nan')):.2f} s from launch "
        f"({result['solve_step']} steps)"
    )


def run_scaling(args, shipped: dict[str, Any]) -> list[dict[str, Any]]:
    points = []
    # The shipped config scaled the way PPO configs scale: the same rollout length and the same
    # number of gradient steps per update, so the minibatch grows with num_envs.
    num_minibatches = shipped["num_envs"] * shipped["num_steps"] // shipped["minibatch_size"]
    for num_envs in args.scaling_envs:
        rollout = num_envs * shipped["num_steps"]
        target = max(1, rollout // num_minibatches)
        minibatch = max(size for size in range(1, target + 1) if rollout % size == 0)  # must divide
        settings = dict(shipped, num_envs=num_envs, minibatch_size=minibatch)
        total = max(args.throughput_steps, 4 * rollout)
        params = {
            "config_path": str(args.configs / "cartpole.yaml"),
            "settings": settings,
            "env_name": "cartpole",
            "total_steps": total,
            "device": args.device,
        }
        result = best_of(
            [run_in_fresh_process("ours_throughput", params, args.threads, 1800.0) for _ in range(args.repeats)]
        )
        ceiling = best_of(
            [
                run_in_fresh_process(
                    "ours_ceiling",
                    {
                        "config_path": str(args.configs / "cartpole.yaml"),
                        "settings": settings,
                        "device": args.device,
                        "min_seconds": args.ceiling_seconds,
                    },
                    args.threads,
                    600.0,
                )
                for _ in range(args.repeats)
            ]
        )
        result["num_envs"] = num_envs
        result["ceiling_steps_per_second"] = ceiling.get("steps_per_second")
        points.append(result)
        _say(f"[scaling] num_envs {num_envs}: {_rate_text(result)}, ceiling {_rate_text(ceiling)}")
    return points


def run_games(args) -> dict[str, Any]:
    out = {}
    chosen = [name.strip().removesuffix(".yaml") for name in (args.game_configs or "").split(",") if name.strip()]
    for game, targets in TARGET_CONFIGS:
        if chosen and game not in chosen:
            continue
        params = {
            "config_path": str(args.configs / f"{game}.yaml"),
            "targets": list(targets),
            "cap_seconds": args.game_cap,
            "device": args.device,
            "seed": args.game_seed,
        }
        out[game] = run_in_fresh_process("ours_game", params, args.threads, args.game_cap * 1.5 + 300.0)
        result = out[game]
        if "error" in result:
            _say(f"[games] {game}: FAILED: {result['error'].splitlines()[-1][:200]}")
        else:
            _say(
                f"[games] {game}: seconds to targets {result['solve_train_seconds_by_target']}, "
                f"best mean score {result.get('best_score_mean')}"
            )
    return out


def machine_description(threads: int) -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import stable_baselines3

        sb3_version = stable_baselines3.__version__
    except ImportError:
        sb3_version = "not installed"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "stable_baselines3": sb3_version,
        "threads": threads,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replot:
        written = []
        if set(args.sections) - {"off_policy", "games"}:
            results = json.loads((args.out / "results.json").read_text())
            written = report.write_report(results, args.out)
            print(report.render_console(report.build_rows(results)))
        if "off_policy" in args.sections:  # its own files: off_policy.json -> .md and .png
            from benchmarks.off_policy import off_policy_rows, write_section_report

            results = json.loads((args.out / "off_policy.json").read_text())
            written += write_section_report(results, args.out)
            print(report.render_console(off_policy_rows(results["off_policy"])))
        if "games" in args.sections:  # its own files: games.json -> games.md
            from benchmarks import games

            results = json.loads((args.out / "games.json").read_text())
            written += games.write_section_report(results, args.out)
            print(games.render_console(results["games"]))
        print("wrote " + ", ".join(str(path) for path in written))
        return 0
    from benchmarks.ours import shipped_settings

    command = "python -m benchmarks " + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv))
    results: dict[str, Any] = {
        "command": command.strip(),
        "machine": machine_description(args.threads),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    needs_shipped = {"throughput", "ceiling", "scaling"} & set(args.sections)
    shipped = shipped_settings(args.configs / "cartpole.yaml") if needs_shipped else {}
    if shipped:
        results["shipped_settings"] = shipped
        _say(f"shipped CartPole settings: {report.describe_settings(shipped)}")
    if "throughput" in args.sections:
        results["throughput"] = run_throughput(args, shipped)
    if "ceiling" in args.sections:
        results["ceiling"] = run_ceiling(args, shipped)
    if "solve" in args.sections:
        results["time_to_solve"] = run_solve(args)
    if "scaling" in args.sections:
        results["scaling"] = run_scaling(args, shipped)
    if "game_targets" in args.sections:  # kept under "games" in results.json, as report.py and plots.py read it
        results["games"] = run_games(args)
    shipped_games = None
    if "games" in args.sections:  # its own files: games.json / games.md (benchmarks/games.py)
        from benchmarks.games import run_games as run_shipped_games

        shipped_games = run_shipped_games(args, run_in_fresh_process, _say)
    if "off_policy" in args.sections:
        from benchmarks.off_policy import run_off_policy

        results["off_policy"] = run_off_policy(args, run_in_fresh_process, _say)
    if "studio_latency" in args.sections:  # its own file: studio_latency.json (benchmarks/studio_latency.py)
        from benchmarks.studio_latency import run_studio_latency

        results["studio_latency"] = run_studio_latency(out=args.out)
    if "actor_learner" in args.sections:  # its own file: actor_learner.json (benchmarks/actor_learner.py)
        from benchmarks.actor_learner import run_actor_learner

        results["actor_learner"] = run_actor_learner(out=args.out, command="python -m benchmarks --only actor_learner")
    results["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    # The off_policy section keeps its own files (off_policy.md / .json / .png): run alone, it leaves
    # the suite's results.md / results.json as the last run of the other sections wrote them.
    own_files = {"off_policy", "studio_latency", "games", "actor_learner"}
    written = report.write_report(results, args.out) if set(args.sections) - own_files else []
    if "off_policy" in results:
        from benchmarks.off_policy import write_section_report

        written += write_section_report(results, args.out)
    print()
    if set(args.sections) - (own_files - {"off_policy"}):  # the console table holds off_policy's rows too
        print(report.render_console(report.build_rows(results)))
    if shipped_games is not None:
        from benchmarks import games

        written += games.write_section_report({**results, "games": shipped_games}, args.out)
        print(games.render_console(shipped_games))
    print("wrote " + ", ".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
