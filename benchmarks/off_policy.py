"""The off-policy section of the suite: our DQN and SAC against Stable-Baselines3's, side by side.

    python -m benchmarks --only off_policy            4 tasks x 2 sides x seeds, then throughput
    python -m benchmarks --only off_policy --quick    small caps, one seed: checks that it runs
    python -m benchmarks --only off_policy --off-policy-tasks sac_pendulum:budget --out /tmp/x
                                                      one part of one task (see `selected_parts`)

Each task is one of our shipped configs; both sides run its hyperparameters (SB3's names for
them: `benchmarks.sb3_off_policy`), each run in a fresh process, until the mean return of the
last 100 finished episodes reaches the task's target or its cap of training seconds passes.
The table gives the median over seeds of the training seconds and env steps to the target
(a run that never got there counts as infinitely slow: "not reached in N s") and of steps/s.

A task with a `Budget` is also judged as RL Zoo judges budgets: each side trains exactly that many
env steps, then plays EVAL_EPISODES episodes deterministically on held-out env seeds; the median
over seeds of the mean return, against the task's target as the goal.

What SB3 cannot do is turned off on our side for the comparison (`SB3_HAS_NONE`): double Q,
dueling heads, prioritised replay, delayed policy updates. Our CartPole runs use the native
batched CartPole (what a user of cartpole_dqn.yaml gets); SB3 steps Gymnasium's CartPole-v1, the
same physics. The throughput rows time our native CartPole DQN with many envs against SB3.

The table and the section's own files are benchmarks/off_policy_report.py's; the cost of one
update on both sides, timed alone, benchmarks/off_policy_step.py's. This module imports no torch
at the top: the parent process of the suite only orchestrates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The table and the section's files (off_policy.md / .json / .png), by their usual names here.
from benchmarks.off_policy_report import off_policy_rows, summary, task_rows, write_section_report
from benchmarks.report import failed_text

__all__ = [
    "TASKS",
    "ours_off_policy",
    "run_off_policy",
    "off_policy_rows",
    "summary",
    "task_rows",
    "write_section_report",
]


@dataclass(frozen=True)
class Budget:
    """Train exactly `steps` env steps, then evaluate deterministically (see the module's text)."""

    steps: int
    source: str  # whose budget it is, for the table ("RL Zoo's budget")
    why: str = ""  # said once in the section's text: what the mean-100 rows cannot show within it


@dataclass(frozen=True)
class Task:
    name: str
    label: str
    algo: str
    config: str  # a file in the configs folder
    env_id: str  # the Gymnasium id SB3 steps
    target: float
    long: bool = False  # the lunar landers: their own cap and seed count
    budget: Budget | None = None  # also evaluate after a fixed budget; the goal: `target`


PENDULUM_BUDGET = Budget(
    20_000,
    "RL Zoo's budget",
    "Pendulum-v1's episodes last 200 steps, so 20,000 steps are exactly 100 episodes: the mean-100 "
    "return at 20k steps still averages every training episode, the first random and learning ones "
    "included, and cannot pass -200 within RL Zoo's budget; a deterministic evaluation of the trained "
    "policy, as RL Zoo judges it, can.",
)
TASKS = (
    Task("dqn_cartpole", "DQN, CartPole-v1", "dqn", "cartpole_dqn.yaml", "CartPole-v1", 475.0),
    Task("sac_pendulum", "SAC, Pendulum-v1", "sac", "pendulum_sac.yaml", "Pendulum-v1", -200.0, budget=PENDULUM_BUDGET),
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
EVAL_EPISODES = 10  # deterministic episodes of a budget evaluation, per seed (RL Zoo's default)
QUICK_BUDGET_STEPS = 2_000  # --quick: a budget evaluation trains at most this many steps
PARTS = ("target", "budget")  # a task's measurements: to the mean-100 target; after its budget


def selected_parts(names: list[str] | None) -> dict[str, tuple[str, ...]]:
    """What runs, from --off-policy-tasks: task name -> its parts, and "throughput" -> (). An item is
    a task name (every part), NAME:PART (one part) or "throughput"; None: everything."""
    if names is None:
        return {**{task.name: PARTS for task in TASKS}, "throughput": ()}
    known = {task.name for task in TASKS}
    chosen: dict[str, tuple[str, ...]] = {}
    for item in names:
        name, _, part = item.partition(":")
        if item == "throughput":
            chosen["throughput"] = ()
        elif name not in known or part not in ("", *PARTS):
            raise ValueError(
                f"unknown off-policy task {item!r}; choose from throughput, {', '.join(sorted(known))}, "
                f"each optionally :{' or :'.join(PARTS)}"
            )
        else:
            chosen[name] = tuple(dict.fromkeys(chosen.get(name, ()) + ((part,) if part else PARTS)))
    return chosen


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
    eval_episodes: int = 0,
    eval_seed: int = 0,
) -> dict[str, Any]:
    """Our trainer on `config_path` + `overrides` until the mean-100 return reaches `target`, the
    cap passes or the config's `total_timesteps` are done (the same result fields as the peer's).
    eval_episodes: then play the final model that many episodes deterministically on env seed
    `eval_seed` (the project's evaluator), in the result's "evaluation"."""
    from benchmarks.ours import MetricsRecorder, _load, _train, steady_steps_per_second
    from benchmarks.sb3_off_policy import evaluation_summary, thinned

    config = _load(config_path, list(overrides) + [f"device={device}", f"seed={seed}"])
    targets = [] if target is None else [target]
    evaluation: dict[str, Any] = {}

    def evaluate_final_model(result) -> None:
        from trainer.serving.evaluate import evaluate

        played = evaluate(result.final_model, episodes=eval_episodes, device=device, seed=eval_seed, deterministic=True)
        evaluation.update(evaluation_summary(played.returns, eval_seed))

    recorder, seconds, steps = _train(
        config,
        lambda start: MetricsRecorder("recent_return_mean", targets, cap_seconds, start),
        evaluate_final_model if eval_episodes else None,
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
        **({"evaluation": evaluation} if eval_episodes else {}),
    }


# ---------------------------------------------------------------------------------------------
# The section, in the suite's process


def run_off_policy(args, run_in_fresh_process, say) -> dict[str, Any]:
    """Every task on both sides for its seeds, then the many-envs throughput (or what
    --off-policy-tasks picks of them); the results dict."""
    parts = selected_parts(getattr(args, "off_policy_tasks", None))
    out: dict[str, Any] = {"tasks": {}}
    for task in TASKS:
        if task.name in parts:
            out["tasks"][task.name] = _run_task(args, task, parts[task.name], run_in_fresh_process, say)
    if "throughput" in parts:
        out["throughput"] = _run_throughput(args, run_in_fresh_process, say)
    return out


def _run_task(args, task: Task, parts: tuple[str, ...], run_in_fresh_process, say) -> dict[str, Any]:
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
        "parts": list(parts),
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
    if "budget" in parts and task.budget is not None:
        entry["budget"] = _run_budget(args, task, settings, run_in_fresh_process, say)
    timeout = cap * 1.5 + 300.0
    for seed in range(_seeds(args, task) if "target" in parts else 0):
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


def _run_budget(args, task: Task, settings: dict[str, Any], run_in_fresh_process, say) -> dict[str, Any]:
    """Both sides train exactly the task's budget (at most QUICK_BUDGET_STEPS with --quick) at the
    same settings, then play EVAL_EPISODES deterministic episodes on held-out env seeds."""
    from benchmarks.games import EVAL_SEED_OFFSET

    steps = min(task.budget.steps, QUICK_BUDGET_STEPS) if args.quick else task.budget.steps
    overrides = SB3_HAS_NONE[task.algo] + [f"total_timesteps={steps}"]
    settings = dict(settings, total_timesteps=steps)  # the run's length as any schedule sees it
    out: dict[str, Any] = {"steps": steps, "source": task.budget.source, "why": task.budget.why}
    out.update(episodes=EVAL_EPISODES, goal=task.target, ours=[], sb3=[])
    for seed in range(_seeds(args, task)):
        evaluation = {"eval_episodes": EVAL_EPISODES, "eval_seed": EVAL_SEED_OFFSET + seed, "seed": seed}
        sb3 = run_in_fresh_process(
            "sb3_off_policy",
            {"algo": task.algo, "env_id": task.env_id, "settings": settings, "total_steps": steps, **evaluation},
            args.threads,
            3600.0,
        )
        out["sb3"].append(sb3)
        say(f"[off_policy] {task.label}, {steps:,} steps, SB3 seed {seed}: {evaluation_text(sb3)}")
        ours = run_in_fresh_process(
            "ours_off_policy",
            {
                "config_path": str(args.configs / task.config),
                "overrides": overrides,
                "device": args.device,
                **evaluation,
            },
            args.threads,
            3600.0,
        )
        out["ours"].append(ours)
        say(f"[off_policy] {task.label}, {steps:,} steps, ours seed {seed}: {evaluation_text(ours)}")
    return out


def evaluation_text(result: dict) -> str:
    if "error" in result:
        return failed_text(result)
    evaluation = result["evaluation"]
    return (
        f"deterministic return {evaluation['return_mean']:.1f} (min {evaluation['return_min']:.1f}, "
        f"{evaluation['episodes']} episodes) after {result['steps']} steps, {result['train_seconds']:.0f} s"
    )


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
        return failed_text(result)
    return f"{result['steps_per_second']:,.0f} steps/s ({result['steps']} steps, {result['train_seconds']:.1f} s)"


def reach_text(result: dict, cap: float) -> str:
    if "error" in result:
        return failed_text(result)
    rate = f"{result['steps_per_second']:,.0f} steps/s"
    if result.get("solved"):
        return f"reached after {result['solve_train_seconds']:.1f} s, {result['solve_step']} steps ({rate})"
    final = result.get("final_return_mean")
    final_text = "no episode finished" if final is None else f"mean-100 return {final:.1f} at the end"
    return f"not reached in {result['train_seconds']:.0f} s of cap {cap:.0f} s ({result['steps']} steps, {final_text}, {rate})"
