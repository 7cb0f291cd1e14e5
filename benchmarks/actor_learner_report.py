"""The report of `python -m benchmarks.actor_learner` (benchmarks/actor_learner.py): per env a
table of the five runs, the learning curves per env step, the goals of the actor-learner mode
(met or not, from the figures), and the simulated scaling table (benchmarks/actor_learner_sim.py).
"""

from __future__ import annotations

from benchmarks import actor_learner_sim as sim

GOALS = (
    # (name, numerator run, denominator run, at least): steps/s of one run against another
    ("learner + 2 actors against 2 synchronous ranks", "c", "b", 1.5),
    ("the same, one member slowed 5x", "c5", "b5", 2.0),
)
MARKS = (0.25, 0.5, 0.75, 1.0)


def _number(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(value, peer) -> str:
    return f" ({value / peer:.2f}x)" if value and peer else ""


def value_at(curve: list, step: float):
    """The metric of the last update at or before `step` (None before the first)."""
    before = [value for at, value in curve if at <= step]
    return before[-1] if before else None


def curve_rows(entry: dict) -> tuple[list[str], list[tuple[float, bool]]]:
    """Lines of the metric at fixed env steps for every run, and for each mark where (a) has begun
    to learn whether (c) is as close to (a) as (b) is (the synchronous pair's gap as the yardstick
    of one seed's noise)."""
    runs = entry["runs"]
    unslowed = [runs[key] for key in ("a", "b", "c") if key in runs and runs[key]["curve"]]
    if len(unslowed) < 2:
        return [], []
    last = min(run["curve"][-1][0] for run in unslowed)
    lines, verdicts = [], []
    for fraction in MARKS:
        step = fraction * last
        values = {key: value_at(run["curve"], step) for key, run in runs.items()}
        cells = " | ".join(_number(values[key], 1) for key in runs)
        lines.append(f"| {entry['metric']} at {step / 1e3:,.0f} k steps | {cells} |")
        started = runs["a"]["curve"][0][1] if runs.get("a", {}).get("curve") else None
        if all(values.get(key) is not None for key in ("a", "b", "c")) and values["a"] > (started or 0):
            gap = abs(values["b"] - values["a"])
            verdicts.append((step, abs(values["c"] - values["a"]) <= gap))
    return lines, verdicts


def env_table(entry: dict) -> list[str]:
    runs = entry["runs"]
    peer = runs.get("a", {})
    names = [f"({key.replace('5', chr(39))}) {run['name']}" for key, run in runs.items()]
    lines = [f"| {entry['label']} | " + " | ".join(names) + " |", "|---" * (len(runs) + 1) + "|"]

    def row(title: str, cells) -> None:
        lines.append(f"| {title} | " + " | ".join(cells) + " |")

    row(
        "learner steps/s (training seconds; ratio to (a))",
        (
            _number(run["steps_per_second"]) + _ratio(run["steps_per_second"], peer.get("steps_per_second"))
            for run in runs.values()
        ),
    )
    cells = []
    for run in runs.values():
        hit = run["threshold"]
        if hit is None:
            cells.append(
                f"not reached: best {_number(run['best'], 1)} in {run['steps'] / 1e3:,.0f} k steps ({run['bound_seconds']:.0f} s bound)"
            )
        else:
            cells.append(
                f"{hit['training_seconds']:.1f} s / {hit['seconds_from_launch']:.1f} s, {hit['steps'] / 1e3:,.0f} k steps"
            )
    row(f"{entry['metric']} {entry['threshold']:g}: training s / s from launch, steps", cells)
    row(
        "policy lag mean / max (updates)",
        (
            "-" if run["policy_lag_mean"] is None else f"{run['policy_lag_mean']:.1f} / {run['policy_lag_max']}"
            for run in runs.values()
        ),
    )
    row("batches dropped", (_number(run["dropped_batches"]) for run in runs.values()))
    row(
        "each actor's own steps/s",
        (" / ".join(_number(rate) for rate in run["actor_rates"] or []) or "-" for run in runs.values()),
    )
    row(
        "slowed process: share of time stopped",
        (
            "-"
            if not run["slowed"] or run["slowed"]["stopped_share"] is None
            else f"{run['slowed']['stopped_share']:.0%}"
            for run in runs.values()
        ),
    )
    curve, _ = curve_rows(entry)
    return lines + curve


def goal_lines(results: dict) -> list[str]:
    lines = []
    for key, entry in results["envs"].items():
        runs = entry["runs"]
        for name, top, bottom, least in GOALS:
            if top not in runs or bottom not in runs:
                continue
            fast, slow = runs[top]["steps_per_second"], runs[bottom]["steps_per_second"]
            ratio = fast / slow if fast and slow else None
            hits = [runs[which]["threshold"] for which in (top, bottom)]
            timing = (
                f"; time from launch to {entry['threshold']:g}: {hits[1]['seconds_from_launch'] / hits[0]['seconds_from_launch']:.2f}x as fast"
                if all(hits)
                else "; threshold not reached by both"
            )
            verdict = "not measured" if ratio is None else ("met" if ratio >= least else "not met")
            lines.append(f"- {key}, {name}: steps/s {_number(ratio, 2)}x (goal >= {least}x): **{verdict}**{timing}")
        _, verdicts = curve_rows(entry)
        if not verdicts and "c" in runs:
            lines.append(f"- {key}, learning per env step: **not measured** (no common steps where (a) had learned)")
        if verdicts:
            within = sum(ok for _, ok in verdicts)
            lines.append(
                f"- {key}, learning per env step: (c) within the (a)-(b) gap at {within} of {len(verdicts)} marks "
                f"(one seed per run: a yardstick, not a test): **{'met' if within == len(verdicts) else 'not met'}**"
            )
    return lines


def report(results: dict) -> list[str]:
    lines = [
        f"`{results['command']}` on {results['cores']} cores shared with other work: load average "
        f"{results['load_at_start']:.1f} at the start, {results.get('load_at_end', 0):.1f} at the end. "
        "The slowed process is stopped (SIGSTOP) 40 ms of every 50 ms by the benchmark.",
        "",
    ]
    for entry in results["envs"].values():
        lines += env_table(entry) + [""]
    lines += ["Goals:", *goal_lines(results), ""]
    for entry in results["envs"].values():
        if entry.get("costs"):
            lines += sim.table(entry["label"].split(" (")[0], entry["costs"]) + [""]
    return lines
