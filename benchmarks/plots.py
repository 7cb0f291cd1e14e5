"""PNG plots of the suite's results (matplotlib, a benchmark-only dependency)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from trainer.run.files import atomic_write  # noqa: E402

OURS_COLOR, SB3_COLOR, GYM_COLOR = "#d62728", "#1f77b4", "#ff7f0e"


def _save(figure, path: Path) -> Path:
    figure.tight_layout()
    atomic_write(path, lambda file: figure.savefig(file, dpi=110, format="png"))
    plt.close(figure)
    return path


def plot_throughput(throughput: dict[str, Any], path: Path) -> Path | None:
    bars = []  # (label, steps per second, color)
    for name, profile in throughput.get("profiles", {}).items():
        for key, label, color in (
            ("sb3", "SB3", SB3_COLOR),
            ("ours_gym", "ours, Gymnasium adapter", GYM_COLOR),
            ("ours_native", "ours, native env", OURS_COLOR),
        ):
            result = profile.get(key)
            if result and "error" not in result:
                bars.append((f"{label}\n({name} settings)", result["steps_per_second"], color))
    if not bars:
        return None
    figure, axes = plt.subplots(figsize=(8, 0.6 * len(bars) + 1.5))
    labels, rates, colors = zip(*bars)
    axes.barh(range(len(bars)), rates, color=colors)
    axes.set_yticks(range(len(bars)), labels, fontsize=8)
    axes.set_xscale("log")
    axes.set_xlabel("environment steps per second, PPO training on CartPole-v1 (log scale)")
    for index, rate in enumerate(rates):
        axes.text(rate, index, f" {rate:,.0f}", va="center", fontsize=8)
    axes.set_title("Training throughput, same network and total steps")
    return _save(figure, path)


def _plot_series(axes, runs: list[dict], color: str, label: str, value_index: int = 2) -> None:
    for index, run in enumerate(runs):
        series = run.get("series") or []
        if not series:
            continue
        seconds = [point[0] for point in series]
        values = [point[value_index] for point in series]
        axes.plot(seconds, values, color=color, alpha=0.8, linewidth=1.2, label=label if index == 0 else None)


def plot_time_to_solve(solve: dict[str, Any], path: Path) -> Path | None:
    if not solve.get("ours") and not solve.get("sb3"):
        return None
    figure, axes = plt.subplots(figsize=(8, 4.5))
    _plot_series(axes, solve.get("sb3", []), SB3_COLOR, "SB3, RL Zoo hyperparameters")
    _plot_series(axes, solve.get("ours", []), OURS_COLOR, "ours, configs/cartpole.yaml")
    axes.axhline(
        solve.get("target", 475.0),
        color="gray",
        linestyle="--",
        linewidth=1,
        label=f"target {solve.get('target', 475.0):g}",
    )
    axes.set_xscale("log")
    axes.set_xlabel("training-loop wall seconds (log scale)")
    axes.set_ylabel("mean return of the last 100 episodes")
    axes.set_title("CartPole-v1: return against wall time (one line per seed)")
    axes.legend(loc="upper left")
    return _save(figure, path)


def plot_scaling(scaling: list[dict], path: Path) -> Path | None:
    points = [(p["num_envs"], p["steps_per_second"]) for p in scaling if "error" not in p]
    if not points:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    envs, rates = zip(*points)
    axes.plot(envs, rates, marker="o", color=OURS_COLOR, label="end to end (train)")
    ceilings = [
        (p["num_envs"], p["ceiling_steps_per_second"])
        for p in scaling
        if "error" not in p and p.get("ceiling_steps_per_second")
    ]
    if ceilings:
        axes.plot(*zip(*ceilings), marker="s", linestyle="--", color="gray", label="update-only ceiling")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("num_envs")
    axes.set_ylabel("environment steps per second")
    axes.set_title("Scaling with num_envs: CartPole, shipped config,\nsame gradient steps per update")
    axes.legend()
    return _save(figure, path)


def plot_games(games: dict[str, Any], path: Path) -> Path | None:
    games = {name: result for name, result in games.items() if result.get("series")}
    if not games:
        return None
    figure, all_axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4.5), squeeze=False)
    for axes, (name, result) in zip(all_axes[0], games.items()):
        _plot_series(axes, [result], OURS_COLOR, "mean score of the last 100 episodes")
        for target in result.get("targets", []):
            axes.axhline(float(target), color="gray", linestyle="--", linewidth=0.8)
        axes.set_xlabel("training-loop wall seconds")
        axes.set_ylabel("mean game score")
        axes.set_title(f"{name}: score against wall time")
        axes.legend(loc="upper left")
    return _save(figure, path)


def write_plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    written = [
        plot_throughput(results.get("throughput", {}), out_dir / "throughput.png"),
        plot_time_to_solve(results.get("time_to_solve", {}), out_dir / "time_to_solve.png"),
        plot_scaling(results.get("scaling", []), out_dir / "scaling.png"),
        plot_games(results.get("games", {}), out_dir / "games.png"),
    ]
    return [path for path in written if path is not None]
