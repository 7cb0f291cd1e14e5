"""The off-policy section's table and files: what `benchmarks.off_policy` measured, as the rows of
the suite's table (ours, SB3, the ratio) and as off_policy.json / off_policy.md / off_policy.png
beside the suite's results.

Medians over seeds; a run that never reached the target counts as infinitely slow, and where one
side never got there the ratio is the bound its shortest unreached run still gives. A budget
evaluation's row gives the median over seeds of each seed's mean deterministic return, with the
task's target as the goal, met or not by ours.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

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
    if "target" not in entry.get("parts", ["target"]):  # --off-policy-tasks NAME:budget
        return []
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


def _evaluations(runs: list[dict]) -> dict[str, Any]:
    """Each seed's mean deterministic return, their median, the worst episode, the first failure."""
    means = [run["evaluation"]["return_mean"] for run in runs if "evaluation" in run]
    worst = [run["evaluation"]["return_min"] for run in runs if "evaluation" in run]
    return {
        "runs": len(runs),
        "means": means,
        "median": statistics.median(means) if means else None,
        "worst_episode": min(worst) if worst else None,
        "error": next((run["error"] for run in runs if "error" in run), None),
    }


def _evaluation_text(side: dict[str, Any]) -> str:
    if side["median"] is None:
        return "FAILED: " + (side["error"] or "no run").splitlines()[-1][:80]
    seeds = ", ".join(f"{mean:.0f}" for mean in side["means"])
    failed = side["runs"] - len(side["means"])
    return f"{side['median']:.1f} (seeds {seeds}; worst episode {side['worst_episode']:.0f})" + (
        f"; {failed} FAILED" if failed else ""
    )


def budget_rows(entry: dict[str, Any]) -> list:
    """The budget evaluation of a task, if it had one: ours and SB3, the goal judged for ours."""
    from benchmarks.report import Row, _yes_no

    budget = entry.get("budget")
    if not budget:
        return []
    ours, sb3 = _evaluations(budget["ours"]), _evaluations(budget["sb3"])
    source = f"{budget['source']}; " if budget.get("source") else ""
    goal = budget["goal"]
    return [
        Row(
            f"{entry['label']}: deterministic evaluation return after {budget['steps']:,} env steps "
            f"({source}median of {ours['runs']} seed(s), {budget['episodes']} episodes each)",
            _evaluation_text(ours),
            _evaluation_text(sb3),
            "",
            f">= {goal:g}",
            _yes_no(None if ours["median"] is None else ours["median"] >= goal),
        )
    ]


def budget_text(section: dict[str, Any]) -> list[str]:
    """The section's words on its budget evaluations, once: how they are made and what the mean-100
    rows cannot show within the budget."""
    from benchmarks.games import EVAL_SEED_OFFSET

    budgets = [entry["budget"] for entry in section.get("tasks", {}).values() if entry.get("budget")]
    if not budgets:
        return []
    lines = [
        "Budget evaluation (how RL Zoo judges its budgets): each side trains exactly the budget's env steps at the "
        f"same settings, then plays {budgets[0]['episodes']} episodes deterministically on held-out env seeds "
        f"({EVAL_SEED_OFFSET} + the training seed; SB3: evaluate_policy); Met: ours (median over seeds) against the "
        "goal."
    ]
    lines += [budget["why"] for budget in budgets if budget.get("why")]
    return [" ".join(lines), ""]


def throughput_rows(throughput: dict[str, Any], cartpole: dict[str, Any] | None) -> list:
    from benchmarks.off_policy import MANY_ENVS
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
        rows += task_rows(entry) + budget_rows(entry)
    if "throughput" in results:
        rows += throughput_rows(results["throughput"], tasks.get("dqn_cartpole"))
    return rows


# ---------------------------------------------------------------------------------------------
# The section's own files, beside the suite's results.md (which the next run of other sections
# rewrites without it): off_policy.json, off_policy.md and off_policy.png


def write_section_report(results: dict[str, Any], out_dir: Path) -> list[Path]:
    from benchmarks import report
    from benchmarks.off_policy import SB3_HAS_NONE
    from trainer.run.files import atomic_write

    section = results["off_policy"]
    json_path, md_path = report.write_section_json(results, "off_policy", out_dir), out_dir / "off_policy.md"
    sb3 = results.get("machine", {}).get("stable_baselines3", "?")
    header = [
        "# Off-policy benchmark: our DQN and SAC against Stable-Baselines3's",
        "",
        report.measured_line(results, "thread(s) each side", f"stable-baselines3 {sb3}, "),
        "",
        "Each run in a fresh process; both sides run the config's hyperparameters (what SB3 lacks is off on "
        "ours: " + "; ".join(f"{algo}: {', '.join(keys)}" for algo, keys in SB3_HAS_NONE.items()) + "). "
        "Ratio: SB3 / ours for seconds and steps to the target, ours / SB3 for steps/s (above 1: ours ahead).",
        "",
        *budget_text(section),
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

    tasks = [entry for entry in section.get("tasks", {}).values() if "error" not in entry and entry.get("ours")]
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
