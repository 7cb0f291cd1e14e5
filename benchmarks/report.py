"""Turn the suite's results into a table (console + markdown), a JSON file and PNG plots.

Every figure in the table comes from `results` as measured; goals are the ones of issue 5 and
are never adjusted to the figures.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.run.files import atomic_write

# Issue 5's goals on the 2-core CPU.
GOAL_IDENTICAL_SETTINGS_RATIO = 2.0  # ours / SB3 steps per second, same settings
GOAL_SHIPPED_VS_ZOO_RATIO = 30.0  # ours (shipped config) / SB3 (RL Zoo config) steps per second
GOAL_CEILING_FRACTION = 0.70  # end-to-end / update-only steps per second
GOAL_SOLVE_SPEEDUP = 10.0  # SB3 / ours training-loop seconds to mean-100 return 475 (aim 15)
AIM_SOLVE_SPEEDUP = 15.0
GOAL_SOLVE_SINCE_LAUNCH_SECONDS = 4.0  # ours, from `python ...` to solved
GOAL_FLAPPY = (50.0, 600.0)  # mean score (pipes) within seconds
GOAL_SNAKE = (20.0, 900.0)  # mean food eaten within seconds
GOAL_FLAPPY_1000 = (100.0, 60.0)  # issue 25: the slow phase from 50 to 100 pipes gone (training episodes)


@dataclass
class Row:
    """One line of the results table."""

    measurement: str
    ours: str
    peer: str = ""
    ratio: str = ""
    goal: str = ""
    met: str = ""


def failed_text(result: dict) -> str:
    """The progress line of a fresh-process measurement that failed: the last line of its error."""
    return "FAILED: " + result["error"].splitlines()[-1][:200]


def _fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} steps/s"


def _fmt_seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f} s"


def _fmt_ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}x"


def _yes_no(condition: bool | None) -> str:
    return "n/a" if condition is None else ("yes" if condition else "NO")


def _rate(result: dict | None) -> float | None:
    if not result or "error" in result:
        return None
    return result.get("steps_per_second")


def _divide(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def describe_settings(settings: dict[str, Any]) -> str:
    return (
        f"{settings['num_envs']} envs x {settings['num_steps']} steps, "
        f"{settings['epochs']} epoch(s) of minibatch {settings['minibatch_size']}, "
        f"net {'x'.join(str(size) for size in settings['hidden_sizes'])}"
    )


def throughput_rows(throughput: dict[str, Any]) -> list[Row]:
    rows = []
    profiles = throughput.get("profiles", {})
    for name, profile in profiles.items():
        settings = describe_settings(profile["settings"])
        sb3 = _rate(profile.get("sb3"))
        native = _rate(profile.get("ours_native"))
        gym = _rate(profile.get("ours_gym"))
        ratio = _divide(native, sb3)
        rows.append(
            Row(
                f"Throughput, identical settings ({name}: {settings}), native CartPole",
                _fmt_rate(native),
                _fmt_rate(sb3),
                _fmt_ratio(ratio),
                f">= {GOAL_IDENTICAL_SETTINGS_RATIO:.0f}x",
                _yes_no(None if ratio is None else ratio >= GOAL_IDENTICAL_SETTINGS_RATIO),
            )
        )
        if "ours_gym" in profile:
            rows.append(
                Row(
                    f"Throughput, identical settings ({name}), ours through the Gymnasium adapter",
                    _fmt_rate(gym),
                    _fmt_rate(sb3),
                    _fmt_ratio(_divide(gym, sb3)),
                )
            )
    shipped, zoo = profiles.get("shipped"), profiles.get("rl_zoo")
    if shipped and zoo:
        ratio = _divide(_rate(shipped.get("ours_native")), _rate(zoo.get("sb3")))
        rows.append(
            Row(
                "Throughput, our shipped config vs SB3 with the RL Zoo config",
                _fmt_rate(_rate(shipped.get("ours_native"))),
                _fmt_rate(_rate(zoo.get("sb3"))),
                _fmt_ratio(ratio),
                f">= {GOAL_SHIPPED_VS_ZOO_RATIO:.0f}x",
                _yes_no(None if ratio is None else ratio >= GOAL_SHIPPED_VS_ZOO_RATIO),
            )
        )
    return rows


def ceiling_rows(ceiling: dict[str, Any], throughput: dict[str, Any]) -> list[Row]:
    """End to end against the update-only ceiling, like for like: the ceiling is timed after a
    warm-up update, so the goal compares it with the training run's steady rate (from its first
    update to its last); the whole call (setup and first update included) is shown beside it."""
    rows = []
    profiles = throughput.get("profiles", {})
    for name, result in ceiling.items():
        ceiling_rate = _rate(result)
        ours = profiles.get(name, {}).get("ours_native") or {}
        steady = ours.get("steady_steps_per_second")
        fraction = _divide(steady, ceiling_rate)
        rows.append(
            Row(
                f"End-to-end / update-only ceiling ({name} settings), steady rate (after the first update)",
                _fmt_rate(steady),
                f"ceiling {_fmt_rate(ceiling_rate)}",
                "" if fraction is None else f"{fraction:.0%}",
                f">= {GOAL_CEILING_FRACTION:.0%}",
                _yes_no(None if fraction is None else fraction >= GOAL_CEILING_FRACTION),
            )
        )
        whole_call = _divide(_rate(ours), ceiling_rate)
        rows.append(
            Row(
                "the same, whole training call (setup and first update included)",
                _fmt_rate(_rate(ours)),
                f"ceiling {_fmt_rate(ceiling_rate)}",
                "" if whole_call is None else f"{whole_call:.0%}",
                "",
                "",
            )
        )
    return rows


def _median(values: list[float | None]) -> float | None:
    """Median over runs, counting a run that never solved as infinitely slow."""
    if not values:
        return None
    median = statistics.median([float("inf") if v is None else v for v in values])
    return None if median == float("inf") else median


def solve_summary(runs: list[dict]) -> dict[str, Any]:
    ok = [run for run in runs if "error" not in run]
    return {
        "runs": len(runs),
        "solved": sum(1 for run in ok if run.get("solved")),
        "median_train_seconds": _median([run.get("solve_train_seconds") for run in ok]),
        "median_since_launch": _median([run.get("solve_since_launch") for run in ok]),
        "train_seconds": [run.get("solve_train_seconds") for run in ok],
        "since_launch": [run.get("solve_since_launch") for run in ok],
    }


def solve_rows(solve: dict[str, Any]) -> list[Row]:
    target = solve.get("target", 475.0)
    ours, sb3 = solve_summary(solve.get("ours", [])), solve_summary(solve.get("sb3", []))
    speedup = _divide(sb3["median_train_seconds"], ours["median_train_seconds"])
    launch_speedup = _divide(sb3["median_since_launch"], ours["median_since_launch"])
    runs = f"median of {ours['runs']} seeds; solved {ours['solved']}/{ours['runs']} vs {sb3['solved']}/{sb3['runs']}"
    return [
        Row(
            f"CartPole time to mean-100 return {target:g}, training loop ({runs})",
            _fmt_seconds(ours["median_train_seconds"]),
            _fmt_seconds(sb3["median_train_seconds"]),
            _fmt_ratio(speedup),
            f">= {GOAL_SOLVE_SPEEDUP:.0f}x (aim {AIM_SOLVE_SPEEDUP:.0f}x)",
            _yes_no(None if speedup is None else speedup >= GOAL_SOLVE_SPEEDUP),
        ),
        Row(
            f"CartPole time to mean-100 return {target:g}, from process launch",
            _fmt_seconds(ours["median_since_launch"]),
            _fmt_seconds(sb3["median_since_launch"]),
            _fmt_ratio(launch_speedup),
            f"ours < {GOAL_SOLVE_SINCE_LAUNCH_SECONDS:.0f} s",
            _yes_no(
                None
                if ours["median_since_launch"] is None
                else ours["median_since_launch"] < GOAL_SOLVE_SINCE_LAUNCH_SECONDS
            ),
        ),
    ]


def game_rows(games: dict[str, Any]) -> list[Row]:
    rows = []
    goals = {"flappy_bird": GOAL_FLAPPY, "flappy_bird_1000": GOAL_FLAPPY_1000, "snake": GOAL_SNAKE}
    units = {"flappy_bird": "pipes", "snake": "food"}  # by env
    for game, result in games.items():
        if "error" in result:
            rows.append(Row(f"{game}: run failed", result["error"].splitlines()[-1][:80]))
            continue
        seconds_by_target = result.get("solve_train_seconds_by_target", {})
        cap = result.get("cap_seconds")
        for target, seconds in seconds_by_target.items():
            goal_score, goal_seconds = goals.get(game, (None, None))
            is_goal = goal_score is not None and float(target) == goal_score
            rows.append(
                Row(
                    f"{game}: training seconds to mean score {float(target):g} {units.get(result.get('env_name'), '')}",
                    _fmt_seconds(seconds) if seconds is not None else f"not within {cap:.0f} s",
                    goal=f"<= {goal_seconds:.0f} s" if is_goal else "",
                    met=_yes_no(seconds is not None and seconds <= goal_seconds) if is_goal else "",
                )
            )
        best = result.get("best_score_mean")
        if best is not None:
            rows.append(Row(f"{game}: best mean score seen (cap {cap:.0f} s)", f"{best:.1f}"))
    return rows


def scaling_rows(scaling: list[dict]) -> list[Row]:
    return [
        Row(
            f"Scaling: num_envs {point['num_envs']}",
            _fmt_rate(_rate(point)),
            peer="" if "error" not in point else point["error"].splitlines()[-1][:60],
        )
        for point in scaling
    ]


def build_rows(results: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if "throughput" in results:
        rows += throughput_rows(results["throughput"])
    if "ceiling" in results:
        rows += ceiling_rows(results["ceiling"], results.get("throughput", {}))
    if "time_to_solve" in results:
        rows += solve_rows(results["time_to_solve"])
    if "scaling" in results:
        rows += scaling_rows(results["scaling"])
    if "games" in results:
        rows += game_rows(results["games"])
    if "off_policy" in results:
        from benchmarks.off_policy import off_policy_rows

        rows += off_policy_rows(results["off_policy"])
    return rows


HEADERS = ("Measurement", "Ours", "SB3 / reference", "Ratio", "Goal", "Met")


def render_markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in rows:
        cells = (row.measurement, row.ours, row.peer, row.ratio, row.goal, row.met)
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def render_console(rows: list[Row]) -> str:
    return console_table(HEADERS, [(r.measurement, r.ours, r.peer, r.ratio, r.goal, r.met) for r in rows])


def console_table(headers, lines) -> str:
    """A plain-text table for the terminal: `headers`, a rule, then `lines`, in padded columns."""
    table = [tuple(headers), *lines]
    widths = [max(len(line[column]) for line in table) for column in range(len(headers))]
    out = []
    for index, line in enumerate(table):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out) + "\n"


def write_section_json(results: dict[str, Any], name: str, out_dir: Path) -> Path:
    """<out_dir>/<name>.json: a section that keeps its own files (its figures, the command, the
    machine and the times), beside the suite's results.json that other sections rewrite."""

    out_dir.mkdir(parents=True, exist_ok=True)
    kept = {key: results.get(key) for key in ("command", "machine", "started", "finished")}
    return atomic_write(out_dir / f"{name}.json", json.dumps({**kept, name: results[name]}, indent=1))


def measured_line(results: dict[str, Any], threads: str = "thread(s)", extra: str = "") -> str:
    """The markdown lines saying how the figures were taken: the command, when, on what."""
    machine = results.get("machine", {})
    return (
        f"Command: `{results.get('command', '')}`  \n"
        f"Measured: {results.get('finished', '')} on {machine.get('cpu', '?')} ({machine.get('cores', '?')} cores), "
        f"torch {machine.get('torch', '?')} ({machine.get('threads', '?')} {threads}), {extra}"
        f"load average at start {machine.get('load_average_at_start', '?')}."
    )


def write_report(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write results.json, results.md and the PNG plots; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = build_rows(results)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    atomic_write(json_path, json.dumps(results, indent=1))
    machine = results.get("machine", {})
    header = [
        "# Benchmark results",
        "",
        f"Command: `{results.get('command', '')}`  ",
        f"Measured: {results.get('finished', '')} on {machine.get('cpu', '?')} "
        f"({machine.get('cores', '?')} cores), torch {machine.get('torch', '?')} "
        f"({machine.get('threads', '?')} thread(s) for every contender), "
        f"stable-baselines3 {machine.get('stable_baselines3', '?')}, "
        f"load average at start {machine.get('load_average_at_start', '?')}.",
        "",
    ]
    atomic_write(md_path, "\n".join(header) + "\n" + render_markdown(rows))
    try:
        from benchmarks.plots import write_plots
    except ImportError as error:  # a benchmark-only dependency: the figures are kept without it
        print(f"plots skipped ({error}); pip install -r benchmarks/requirements.txt for the PNGs")
        return [json_path, md_path]
    return [json_path, md_path] + write_plots(results, out_dir)
