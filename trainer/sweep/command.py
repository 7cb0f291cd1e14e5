"""`python -m trainer sweep`: an Optuna study over the declared config keys, each trial a normal
run folder trained in a process of its own (docs/sweeps.md).

    python -m trainer sweep --space sweep.yaml --trials 40 --jobs 2 [--seeds 3] [--name NAME]
                            [--runs-dir runs] [--storage postgresql://user@host/db] [--slots N]

The sweep lives in runs/sweeps/<name>/ (trainer/run/layout.py SWEEP_LAYOUT): study.db, best.yaml
and trials/<trial>-seed<seed>/. The same command again continues the study: it runs only the
trials still missing to --trials, and the trials a stopped or killed sweep left unfinished resume
their run folders. The last line printed is the path of best.yaml.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.config.checks import ConfigError
from trainer.run.layout import safe_name, sweep_folder, trials_folder
from trainer.sweep import study as book
from trainer.sweep.space import read_sweep

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer sweep", description="Tune config keys with Optuna (docs/sweeps.md)."
    )
    parser.add_argument(
        "--space", required=True, help="the sweep file: base, objective, budget, space (docs/sweeps.md)"
    )
    parser.add_argument("--trials", type=int, default=20, help="trials the study should hold in all (default 20)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="trials trained at once, each in its own process (default 1)"
    )
    parser.add_argument(
        "--seeds", type=int, default=1, help="runs per trial, seeds seed..seed+K-1; the objective is their mean"
    )
    parser.add_argument("--name", help="the study's name (default: the sweep file's name); the same name continues it")
    parser.add_argument("--runs-dir", default="runs", help="the sweep's folder is RUNS_DIR/sweeps/NAME (default runs)")
    parser.add_argument(
        "--storage", help="a database URL for the study (default: SQLite, study.db in the sweep's folder)"
    )
    parser.add_argument(
        "--slots",
        type=int,
        help="runs that train at once in RUNS_DIR, this sweep's, other sweeps' and a studio's together; "
        "the others wait in the run queue (default: one per GPU, else one per usable CPU core)",
    )
    return parser


def command(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    for flag in ("trials", "jobs", "seeds", "slots"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            print(f"error: --{flag} must be at least 1, got {getattr(args, flag)}", file=sys.stderr)
            return EXIT_USAGE
    try:
        import optuna  # noqa: F401
    except ImportError:
        print("error: sweeps need Optuna: python -m pip install 'optuna>=4'", file=sys.stderr)
        return EXIT_USAGE
    name = safe_name(args.name or Path(args.space).stem)
    folder = sweep_folder(args.runs_dir, name)
    try:
        sweep = read_sweep(args.space)
        folder.mkdir(parents=True, exist_ok=True)
        storage = book.open_storage(book.storage_url(args.storage, folder))
        study = book.open_study(sweep, name, storage, args.seeds)
        if not study.trials and trials_folder(folder).is_dir() and any(trials_folder(folder).iterdir()):
            raise book.StudyError(
                f"{trials_folder(folder)} holds the runs of an earlier study named {name!r}, but the study "
                f"is new: give --name NEW, or move that folder away"
            )
    except (ConfigError, book.StudyError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    from trainer.sweep.runner import SweepRunner  # the loop and its processes, once the sweep is sound

    runner = SweepRunner(
        sweep, study, storage, folder, args.trials, args.jobs, args.seeds, runs_dir=args.runs_dir, slots=args.slots
    )
    try:
        return finish(runner, runner.run())
    except KeyboardInterrupt:  # a second Ctrl-C: the runs stop themselves, the next sweep requeues them
        print("aborted: run the same command again to continue", file=sys.stderr)
        return EXIT_STOPPED


def finish(runner, status: str) -> int:
    """The summary, best.yaml, and its path as the last line."""
    stopped = f"; stopped ({runner.stopping}): run the same command again to continue" if status == "stopped" else ""
    print(f"{book.tally(runner.study, runner.target)}{stopped}", flush=True)
    written = book.write_best(runner.study, runner.sweep, runner.folder)
    if written is None:
        print("error: no trial has finished, so there is no best config yet", file=sys.stderr)
        return EXIT_STOPPED if status == "stopped" else EXIT_FAILED
    path, best = written
    swept = book.describe(book.best_values(runner.sweep, best), runner.sweep.params)
    print(f"best: trial {best.number}, {runner.sweep.objective.metric} {best.value:.4g}: {swept}", flush=True)
    print(path, flush=True)
    return EXIT_STOPPED if status == "stopped" else EXIT_OK
