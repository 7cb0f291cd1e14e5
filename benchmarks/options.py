"""The benchmark suite's command line: its sections and options (`python -m benchmarks --help`).

benchmarks/run.py runs what `parse_args` returns.
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

SECTIONS = (
    "throughput",
    "ceiling",
    "solve",
    "scaling",
    "game_targets",
    "games",
    "off_policy",
    "studio_latency",
    "actor_learner",
)
DEFAULT_SECTIONS = ("throughput", "ceiling", "solve", "scaling")
SCALING_NUM_ENVS = (16, 64, 256, 1024, 4096)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="RL Studio against Stable-Baselines3: throughput, time to solve, games, "
        "update-only ceiling and scaling. Prints a table; writes PNG plots and "
        "results.md / results.json.",
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated sections to run, from {', '.join(SECTIONS)} (default: {', '.join(DEFAULT_SECTIONS)})",
    )
    parser.add_argument(
        "--games",
        action="store_true",
        help="also run game_targets: Flappy Bird and Snake to their score targets (capped by --game-cap)",
    )
    parser.add_argument(
        "--game-configs",
        default=None,
        help="games: comma-separated config file names (default: every config whose env is a game); "
        "game_targets: those of its configs (flappy_bird, flappy_bird_1000, snake) to time",
    )
    parser.add_argument(
        "--game-episodes", type=int, default=None, help="games: greedy games per seed (default 100, 10 with --quick)"
    )
    parser.add_argument(
        "--keep-models",
        type=Path,
        default=None,
        metavar="DIR",
        help="games: keep each run's final model as DIR/CONFIG_seedN.pth, for analysis afterwards "
        "(benchmarks.flappy_deaths, benchmarks.snake_ends); by default they are deleted",
    )
    parser.add_argument(
        "--game-parallel",
        type=int,
        default=1,
        help="games: runs at a time, each in its own process (default 1; more only with spare cores)",
    )
    parser.add_argument(
        "--game-steps",
        type=int,
        default=None,
        help="games: train this many steps instead of each config's total_timesteps (50000 with --quick)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small budgets and one seed: checks the suite works, figures are rough"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads for every contender (default 1: as fast as 2 here)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measure each throughput / ceiling figure this many times, round after "
        "round, and keep the fastest (default 1; 2-3 on a busy machine)",
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds for time to solve (default 3, or 1 with --quick)"
    )
    parser.add_argument(
        "--throughput-steps",
        type=int,
        default=None,
        help="total environment steps of every throughput run (default 100000, 20000 with --quick)",
    )
    parser.add_argument(
        "--game-cap", type=float, default=None, help="training seconds allowed per game (default 900, 60 with --quick)"
    )
    parser.add_argument("--game-seed", type=int, default=0, help="game_targets: the seed of every run (default 0)")
    parser.add_argument(
        "--scaling-envs",
        default=None,
        help=f"comma-separated num_envs for the scaling section (default {','.join(map(str, SCALING_NUM_ENVS))})",
    )
    parser.add_argument(
        "--ceiling-seconds",
        type=float,
        default=None,
        help="seconds to time the update-only ceiling per setting (default 5, 1 with --quick)",
    )
    parser.add_argument(
        "--off-policy-cap",
        type=float,
        default=None,
        help="off_policy: training seconds allowed per CartPole / Pendulum run (default 300, 30 with --quick)",
    )
    parser.add_argument(
        "--lunar-cap",
        type=float,
        default=None,
        help="off_policy: training seconds allowed per lunar lander run (default 900, 20 with --quick)",
    )
    parser.add_argument(
        "--lunar-seeds", type=int, default=None, help="off_policy: seeds of each lunar lander (default 1)"
    )
    parser.add_argument(
        "--off-policy-steps",
        type=int,
        default=None,
        help="off_policy: env steps of the DQN CartPole throughput runs (default 200000, 20000 with --quick)",
    )
    parser.add_argument(
        "--off-policy-tasks",
        default=None,
        help="off_policy: comma-separated tasks to run (default all, and the throughput), e.g. sac_pendulum, or "
        "sac_pendulum:budget for only its budget evaluation, or throughput",
    )
    parser.add_argument("--device", default="cpu", help="device for our trainer (SB3 stays on cpu)")
    parser.add_argument(
        "--configs",
        type=Path,
        default=REPO_ROOT / "configs",
        help="folder of the shipped YAML configs (default: the repo's configs/)",
    )
    parser.add_argument(
        "--replot", action="store_true", help="measure nothing: rewrite the table and plots from <out>/results.json"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "benchmarks" / "results",
        help="where results.md, results.json and the PNG plots go",
    )
    args = parser.parse_args(argv)
    sections = (
        DEFAULT_SECTIONS if args.only is None else tuple(name.strip() for name in args.only.split(",") if name.strip())
    )
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.games and "game_targets" not in sections:
        sections = sections + ("game_targets",)
    args.sections = sections
    if args.repeats < 1:
        parser.error(f"--repeats must be a positive integer, got {args.repeats}")
    if args.threads < 1:
        parser.error(f"--threads must be a positive integer, got {args.threads}")
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.throughput_steps = args.throughput_steps or (20_000 if args.quick else 100_000)
    args.game_cap = args.game_cap or (60.0 if args.quick else 900.0)
    args.ceiling_seconds = args.ceiling_seconds or (1.0 if args.quick else 5.0)
    args.off_policy_cap = args.off_policy_cap or (30.0 if args.quick else 300.0)
    args.lunar_cap = args.lunar_cap or (20.0 if args.quick else 900.0)
    args.lunar_seeds = args.lunar_seeds or 1
    args.off_policy_steps = args.off_policy_steps or (20_000 if args.quick else 200_000)
    if args.off_policy_tasks is not None:
        from benchmarks.off_policy import selected_parts

        args.off_policy_tasks = [name.strip() for name in args.off_policy_tasks.split(",") if name.strip()]
        try:
            selected_parts(args.off_policy_tasks)
        except ValueError as error:
            parser.error(str(error))
    try:
        args.scaling_envs = (
            [int(n) for n in args.scaling_envs.split(",")]
            if args.scaling_envs
            else list(SCALING_NUM_ENVS[:3] if args.quick else SCALING_NUM_ENVS)
        )
    except ValueError:
        parser.error(f"--scaling-envs must be comma-separated integers, got {args.scaling_envs!r}")
    return args
