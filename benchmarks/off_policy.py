"""The off-policy section of the suite: our DQN and SAC against Stable-Baselines3's, side by side.

    python -m benchmarks --only off_policy            4 tasks x 2 sides x seeds, then throughput
    python -m benchmarks --only off_policy --quick    small caps, one seed: checks that it runs

Each task is one of our shipped configs; both sides run its hyperparameters (SB3's names for
them: `benchmarks.sb3_off_policy`), each run in a fresh process, until the mean return of the
last 100 finished episodes reaches the task's target or its cap of training seconds passes.
The table gives the median over seeds of the training seconds and env steps to the target
(a run that never got there counts as infinitely slow: "not reached in N s") and of steps/s.

What SB3 cannot do is turned off on our side for the comparison (`SB3_HAS_NONE`): double Q,
dueling heads, prioritised replay, delayed policy updates. Our CartPole runs use the native
batched CartPole (what a user of cartpole_dqn.yaml gets); SB3 steps Gymnasium's CartPole-v1, the
same physics. The throughput rows time our native CartPole DQN with many envs against SB3.

This module imports no torch at the top: the parent process of the suite only orchestrates.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Task:
    name: str
    label: str
    algo: str
    config: str  # a file in the configs folder
    env_id: str  # the Gymnasium id SB3 steps
    target: float
    long: bool = False  # the lunar landers: their own cap and seed count


TASKS = (
    Task("dqn_cartpole", "DQN, CartPole-v1", "dqn", "cartpole_dqn.yaml", "CartPole-v1", 475.0),
    Task("sac_pendulum", "SAC, Pendulum-v1", "sac", "pendulum_sac.yaml", "Pendulum-v1", -200.0),
    Task(
        "sac_lunar_continuous",
        "SAC, LunarLanderContinuous-v3",
        "sac",
        "lunar_lander_continuous_sac.yaml",
        "LunarLanderContinuous-v3",
        200.0,
        long=True,
    ),
    Task("dqn_lunar", "DQN, LunarLander-v3", "dqn", "lunar_lander_dqn.yaml", "LunarLander-v3", 200.0, long=True),
)

# Our features SB3's DQN / SAC lack, off on our side so that both run the same algorithm.
SB3_HAS_NONE = {
    "dqn": ["double_q=false", "dueling=false", "use_per=false"],
    "sac": ["policy_frequency=1", "use_per=false"],
}
# The settings the peer copies from our config (hidden_sizes is filled in from model_type).
SHARED_KEYS = (
    "num_envs",
    "num_steps",
    "gradient_steps",
    "mini_batch_size",
    "buffer_size",
    "learning_starts",
    "learning_rate",
    "anneal_lr",
    "gamma",
    "tau",
    "n_step",
    "norm_obs",
    "norm_reward",
    "total_timesteps",
)
DQN_KEYS = ("target_update_interval", "exploration_fraction", "exploration_initial_eps", "exploration_final_eps")
SAC_KEYS = ("autotune", "alpha", "target_entropy")

# Our native CartPole DQN with many envs: each update takes one step of every env and makes
# `gradient_steps` gradient steps, the cartpole_dqn.yaml network and learning rate otherwise.
MANY_ENVS = {"num_envs": 256, "num_steps": 1, "gradient_steps": 4}


def _cap_seconds(args, task: Task) -> float:
    return args.lunar_cap if task.long else args.off_policy_cap


def _seeds(args, task: Task) -> int:
    return args.lunar_seeds if task.long else args.seeds


def shared_settings(config_path: Path, algo: str, overrides: list[str]) -> dict[str, Any]:
    """Our config's settings that the peer copies, as plain values (tau filled in, hidden sizes
    from model_type), after `overrides`."""
    from trainer.config.defaults import load_config
    from trainer.nets.spec import MLP_HIDDEN_SIZES

    config = load_config(config_path, overrides=overrides)
    if config.algo != algo:
        raise ValueError(f"{config_path} trains algo {config.algo!r}; the off-policy section runs it as {algo!r}")
    keys = SHARED_KEYS + (DQN_KEYS if algo == "dqn" else SAC_KEYS)
    settings = {key: getattr(config, key) for key in keys}
    settings["hidden_sizes"] = list(config.hidden_sizes or MLP_HIDDEN_SIZES[config.model_type])
    settings["env_name"] = config.env_name
    return settings


# ---------------------------------------------------------------------------------------------
# Our side, in its fresh process


def ours_off_policy(
    config_path: str,
    overrides: list[str],
    target: float | None = None,
    cap_seconds: float | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Our trainer on `config_path` + `overrides` until the mean-100 return reaches `target`, the
    cap passes or the config's `total_timesteps` are done (the same result fields as the peer's)."""
    from benchmarks.ours import MetricsRecorder, _load, _train, steady_steps_per_second
    from benchmarks.sb3_off_policy import thinned

    config = _load(config_path, list(overrides) + [f"device={device}", f"seed={seed}"])
    targets = [] if target is None else [target]
    recorder, seconds, steps = _train(
        config, lambda start: MetricsRecorder("recent_return_mean", targets, cap_seconds, start)
    )
    reached = recorder.reached.get(target) if target is not None else None
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds if seconds > 0 else None,
        "steady_steps_per_second": steady_steps_per_second(recorder.metrics_events),
        "target": target,
        "solved": reached is not None,
        "solve_train_seconds": reached[0] if reached else None,
        "solve_unix_time": reached[1] if reached else None,
        "solve_step": reached[2] if reached else None,
        "capped": cap_seconds is not None and reached is None and seconds >= cap_seconds,
        "best_return_mean": recorder.best,
        "final_return_mean": recorder.series[-1][2] if recorder.series else None,
        "series": thinned(recorder.series),
        "env_name": config.env_name,
        "num_envs": config.num_envs,
    }


# ---------------------------------------------------------------------------------------------
# The section, in the suite's process


def run_off_policy(args, run_in_fresh_process, say) -> dict[str, Any]:
    """Every task on both sides for its seeds, then the many-envs throughput; the results dict."""
    out: dict[str, Any] = {"tasks": {}}
    for task in TASKS:
        out["tasks"][task.name] = _run_task(args, task, run_in_fresh_process, say)
    out["throughput"] = _run_throughput(args, run_in_fresh_process, say)
    return out


def _run_task(args, task: Task, run_in_fresh_process, say) -> dict[str, Any]:
    config_path = args.configs / task.config
    cap = _cap_seconds(args, task)
    entry: dict[str, Any] = {
        "label": task.label,
        "algo": task.algo,
        "config": task.config,
        "env_id": task.env_id,
        "target": task.target,
        "cap_seconds": cap,
        "forced": SB3_HAS_NONE[task.algo],
        "ours": [],
        "sb3": [],
    }
    try:
        settings = shared_settings(config_path, task.algo, SB3_HAS_NONE[task.algo])
    except Exception as error:  # a missing or broken config: the table says so, the rest still runs
        entry["error"] = f"{type(error).__name__}: {error}"
        say(f"[off_policy] {task.label}: FAILED: {entry['error'].splitlines()[0][:200]}")
        return entry
    entry["settings"] = settings
    timeout = cap * 1.5 + 300.0
    for seed in range(_seeds(args, task)):
        sb3 = run_in_fresh_process(
            "sb3_off_policy",
            {
                "algo": task.algo,
                "env_id": task.env_id,
                "settings": settings,
                "total_steps": settings["total_timesteps"],
                "target": task.target,
                "cap_seconds": cap,
                "seed": seed,
            },
            args.threads,
            timeout,
        )
        entry["sb3"].append(sb3)
        say(f"[off_policy] {task.label}, SB3 seed {seed}: {reach_text(sb3, cap)}")
        ours = run_in_fresh_process(
            "ours_off_policy",
            {
                "config_path": str(config_path),
                "overrides": SB3_HAS_NONE[task.algo],
                "target": task.target,
                "cap_seconds": cap,
                "seed": seed,
                "device": args.device,
            },
            args.threads,
            timeout,
        )
        entry["ours"].append(ours)
        say(f"[off_policy] {task.label}, ours seed {seed}: {reach_text(ours, cap)}")
    return entry


def _run_throughput(args, run_in_fresh_process, say) -> dict[str, Any]:
    """Our native CartPole DQN with MANY_ENVS and SB3 at the same settings, over the same steps."""
    config_path = args.configs / "cartpole_dqn.yaml"
    steps = args.off_policy_steps
    overrides = SB3_HAS_NONE["dqn"] + [f"{key}={value}" for key, value in MANY_ENVS.items()]
    overrides += [f"total_timesteps={steps}", f"learning_starts={min(1000, steps // 4)}"]
    out: dict[str, Any] = {"total_steps": steps, "many_envs": dict(MANY_ENVS)}
    try:
        settings = shared_settings(config_path, "dqn", overrides)
    except Exception as error:
        out["error"] = f"{type(error).__name__}: {error}"
        say(f"[off_policy] throughput: FAILED: {out['error'].splitlines()[0][:200]}")
        return out
    out["settings"] = settings
    out["ours_native"] = run_in_fresh_process(
        "ours_off_policy",
        {"config_path": str(config_path), "overrides": overrides + ["env_name=cartpole"], "device": args.device},
        args.threads,
        1800.0,
    )
    say(
        f"[off_policy] throughput, ours native CartPole DQN x {MANY_ENVS['num_envs']} envs: {rate_text(out['ours_native'])}"
    )
    out["sb3"] = run_in_fresh_process(
        "sb3_off_policy",
        {"algo": "dqn", "env_id": "CartPole-v1", "settings": settings, "total_steps": steps},
        args.threads,
        1800.0,
    )
    say(f"[off_policy] throughput, SB3 DQN x {MANY_ENVS['num_envs']} envs: {rate_text(out['sb3'])}")
    return out


def rate_text(result: dict) -> str:
    if "error" in result:
        return "FAILED: " + result["error"].splitlines()[-1][:200]
    return f"{result['steps_per_second']:,.0f} steps/s ({result['steps']} steps, {result['train_seconds']:.1f} s)"


def reach_text(result: dict, cap: float) -> str:
    if "error" in result:
        return "FAILED: " + result["error"].splitlines()[-1][:200]
    rate = f"{result['steps_per_second']:,.0f} steps/s"
    if result.get("solved"):
        return f"reached after {result['solve_train_seconds']:.1f} s, {result['solve_step']} steps ({rate})"
    final = result.get("final_return_mean")
    final_text = "no episode finished" if final is None else f"mean-100 return {final:.1f} at the end"
    return f"not reached in {result['train_seconds']:.0f} s of cap {cap:.0f} s ({result['steps']} steps, {final_text}, {rate})"


# ---------------------------------------------------------------------------------------------
# The table


def _median(values: list[float | None]) -> float | None:
    """Median over seeds, a run that never reached the target counting as infinitely slow."""
    if not values:
        return None
    median = statistics.median([float("inf") if value is None else value for value in values])
    return None if median == float("inf") else median


def summary(runs: list[dict]) -> dict[str, Any]:
    ok = [run for run in runs if "error" not in run]
    rates = [run["steps_per_second"] for run in ok if run.get("steps_per_second")]
    finals = [run["final_return_mean"] for run in ok if run.get("final_return_mean") is not None]
    unreached = [run for run in ok if not run.get("solved")]
    return {
        "runs": len(runs),
        "failed": len(runs) - len(ok),
        "reached": sum(1 for run in ok if run.get("solved")),
        "median_seconds": _median([run.get("solve_train_seconds") for run in ok]) if ok else None,
        "median_steps": _median([run.get("solve_step") for run in ok]) if ok else None,
        "median_rate": statistics.median(rates) if rates else None,
        "final_return": statistics.median(finals) if finals else None,
        # what a run that never got there still tells: it ran out of seconds (the cap) or of steps
        "capped": any(run.get("capped") for run in unreached),
        "unreached_seconds": min((run.get("train_seconds", 0.0) for run in unreached), default=None),
        "unreached_steps": min((run.get("steps", 0) for run in unreached), default=None),
        "error": next((run["error"] for run in runs if "error" in run), None),
    }


def _divide(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}x"


def _unreached(side: dict[str, Any], cap: float) -> str:
    if side["runs"] and side["failed"] == side["runs"]:
        return "FAILED: " + (side["error"] or "").splitlines()[-1][:80]
    final = "" if side["final_return"] is None else f"ended at {side['final_return']:.0f}"
    if side["capped"] or side["unreached_steps"] is None:
        return f"not reached in {cap:.0f} s" + (f" ({final})" if final else "")
    seconds = f"{side['unreached_seconds']:.0f} s"
    return f"not reached in its {side['unreached_steps']:,} steps ({', '.join(filter(None, [seconds, final]))})"


def _bounded_ratio(ours: dict[str, Any], sb3: dict[str, Any], figure: str) -> str:
    """SB3 / ours for `figure` ("seconds" or "steps"); where one side never got there, the bound that
    its shortest unreached run still gives ("> 1.9x": SB3 had run 1.9x ours without getting there)."""
    ours_value, sb3_value = ours[f"median_{figure}"], sb3[f"median_{figure}"]
    if ours_value is not None and sb3_value is not None:
        return _ratio(_divide(sb3_value, ours_value))
    if ours_value is not None and sb3["unreached_" + figure]:
        return "> " + _ratio(_divide(sb3["unreached_" + figure], ours_value))
    if sb3_value is not None and ours["unreached_" + figure]:
        return "< " + _ratio(_divide(sb3_value, ours["unreached_" + figure]))
    return ""


def _seconds(side: dict[str, Any], cap: float) -> str:
    return _unreached(side, cap) if side["median_seconds"] is None else f"{side['median_seconds']:.1f} s"


def _steps(side: dict[str, Any], cap: float) -> str:
    return _unreached(side, cap) if side["median_steps"] is None else f"{side['median_steps']:,.0f} steps"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} steps/s"


def task_rows(entry: dict[str, Any]) -> list:
    from benchmarks.report import Row

    label, target, cap = entry["label"], entry["target"], entry["cap_seconds"]
    if "error" in entry:
        return [Row(f"{label}: not measured", "FAILED: " + entry["error"].splitlines()[0][:100])]
    ours, sb3 = summary(entry["ours"]), summary(entry["sb3"])
    seeds = (
        f"median of {ours['runs']} seed(s); reached {ours['reached']}/{ours['runs']} vs {sb3['reached']}/{sb3['runs']}"
    )
    return [
        Row(
            f"{label}: training seconds to mean-100 return {target:g} ({seeds})",
            _seconds(ours, cap),
            _seconds(sb3, cap),
            _bounded_ratio(ours, sb3, "seconds"),
        ),
        Row(
            f"{label}: env steps to mean-100 return {target:g}",
            _steps(ours, cap),
            _steps(sb3, cap),
            _bounded_ratio(ours, sb3, "steps"),
        ),
        Row(
            f"{label}: steps/s while training ({entry['config']}, same settings both sides)",
            _rate(ours["median_rate"]),
            _rate(sb3["median_rate"]),
            _ratio(_divide(ours["median_rate"], sb3["median_rate"])),
        ),
    ]


def throughput_rows(throughput: dict[str, Any], cartpole: dict[str, Any] | None) -> list:
    from benchmarks.report import Row

    envs = throughput.get("many_envs", MANY_ENVS)["num_envs"]
    if "error" in throughput:
        return [Row("DQN CartPole throughput: not measured", "FAILED: " + throughput["error"].splitlines()[0][:100])]
    ours = (throughput.get("ours_native") or {}).get("steps_per_second")
    sb3 = (throughput.get("sb3") or {}).get("steps_per_second")
    rows = [
        Row(
            f"DQN CartPole throughput, {envs} envs, identical settings (ours native, SB3 Gymnasium)",
            _rate(ours),
            _rate(sb3) if "error" not in throughput.get("sb3", {}) else "FAILED",
            _ratio(_divide(ours, sb3)),
        )
    ]
    if cartpole and "error" not in cartpole:
        sb3_shipped = summary(cartpole["sb3"])["median_rate"]
        rows.append(
            Row(
                f"DQN CartPole: ours native x {envs} envs vs SB3 at {cartpole['config']}'s settings",
                _rate(ours),
                _rate(sb3_shipped),
                _ratio(_divide(ours, sb3_shipped)),
            )
        )
    return rows


def off_policy_rows(results: dict[str, Any]) -> list:
    """The section's lines of the suite's table: per task seconds, steps and steps/s of ours and
    SB3 with SB3 / ours (time, steps) or ours / SB3 (rate) as the ratio; then the throughput."""
    rows = []
    tasks = results.get("tasks", {})
    for entry in tasks.values():
        rows += task_rows(entry)
    if "throughput" in results:
        rows += throughput_rows(results["throughput"], tasks.get("dqn_cartpole"))
    return rows


# ---------------------------------------------------------------------------------------------
# The section's own files, beside the suite's results.md (which the next run of other sections
# rewrites without it): off_policy.json, off_policy.md and off_policy.png


def write_section_report(results: dict[str, Any], out_dir: Path) -> list[Path]:
    import json

    from benchmarks import report
    from trainer.run.files import atomic_write

    section = results["off_policy"]
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "off_policy.json", out_dir / "off_policy.md"
    kept = {key: results.get(key) for key in ("command", "machine", "started", "finished")}
    atomic_write(json_path, json.dumps({**kept, "off_policy": section}, indent=1))
    machine = results.get("machine", {})
    header = [
        "# Off-policy benchmark: our DQN and SAC against Stable-Baselines3's",
        "",
        f"Command: `{results.get('command', '')}`  ",
        f"Measured: {results.get('finished', '')} on {machine.get('cpu', '?')} ({machine.get('cores', '?')} cores), "
        f"torch {machine.get('torch', '?')} ({machine.get('threads', '?')} thread(s) each side), "
        f"stable-baselines3 {machine.get('stable_baselines3', '?')}, "
        f"load average at start {machine.get('load_average_at_start', '?')}.",
        "",
        "Each run in a fresh process; both sides run the config's hyperparameters (what SB3 lacks is off on "
        "ours: " + "; ".join(f"{algo}: {', '.join(keys)}" for algo, keys in SB3_HAS_NONE.items()) + "). "
        "Ratio: SB3 / ours for seconds and steps to the target, ours / SB3 for steps/s (above 1: ours ahead).",
        "",
    ]
    atomic_write(md_path, "\n".join(header) + "\n" + report.render_markdown(off_policy_rows(section)))
    written = [json_path, md_path]
    try:
        written += [path for path in [plot_off_policy(section, out_dir / "off_policy.png")] if path]
    except ImportError as error:
        print(f"off_policy plot skipped ({error})")
    return written


def plot_off_policy(section: dict[str, Any], path: Path) -> Path | None:
    """Mean-100 return against training seconds, one panel per task, every seed of both sides."""
    from benchmarks.plots import OURS_COLOR, SB3_COLOR, _save, plt

    tasks = [entry for entry in section.get("tasks", {}).values() if "error" not in entry]
    if not tasks:
        return None
    figure, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for axis, entry in zip(axes[0], tasks):
        for side, color, label in (("ours", OURS_COLOR, "ours"), ("sb3", SB3_COLOR, "SB3")):
            for index, run in enumerate(entry.get(side, [])):
                series = run.get("series") or []
                if series:
                    seconds, _, returns = zip(*series)
                    axis.plot(seconds, returns, color=color, alpha=0.8, label=label if index == 0 else None)
        axis.axhline(entry["target"], color="gray", linestyle="--", linewidth=1)
        axis.set_title(entry["label"], fontsize=9)
        axis.set_xlabel("training seconds")
        axis.set_ylabel("mean-100 return")
        axis.legend(fontsize=8)
    return _save(figure, path)
