"""What does a sweep buy, and what does pruning save? A real Optuna sweep (`python -m trainer sweep`,
TPE + the median pruner) on Acrobot-v1, then the untuned defaults and the sweep's best.yaml trained
with the same budget on fresh seeds, each timed to the threshold.

    python -m benchmarks.sweep_savings                    # 30 trials, 2 at once (about 20 minutes)
    python -m benchmarks.sweep_savings --trials 6 --budget 30000 --seeds 1 --check-steps 60000   # a quick look

It prints and writes to benchmarks/results/sweep_savings.md:
- the sweep's wall-clock time and its trials (complete / pruned / failed);
- the environment steps the sweep spent against an unpruned sweep of the same trials (every trial
  to its full budget), and the share pruning saved;
- steps to the threshold (the first update whose `recent_score_mean`, the mean score of the last
  100 episodes, reaches it) for the untuned defaults and for best.yaml, median over seeds, and
  their ratio.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from trainer.run.events import read_events
from trainer.run.layout import events_path, study_path, sweep_folder, trials_folder

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "sweep_savings.md"
METRIC = "recent_score_mean"
SPACE = """base: {base}
objective: {{metric: {metric}, direction: maximize, mode: mean}}
budget: {{total_timesteps: {budget}}}
space:
  learning_rate: {{low: 1.0e-4, high: 1.0e-2, log: true}}
  num_envs: {{choices: [8, 16, 32, 64]}}
  batch_size: {{choices: [512, 1024, 2048, 4096]}}
  update_epochs: {{low: 1, high: 10}}
  gamma: {{low: 0.95, high: 0.999}}
  gae_lambda: {{low: 0.8, high: 0.99}}
  ent_coef: {{low: 1.0e-5, high: 1.0e-1, log: true}}
pruner: {pruner}
sampler: {{name: tpe, seed: {seed}}}
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Acrobot-v1", help="a Gymnasium env id (default Acrobot-v1)")
    parser.add_argument("--threshold", type=float, default=-100.0, help=f"{METRIC} to reach (default -100)")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--budget", type=int, default=100_000, help="total_timesteps of every trial")
    parser.add_argument("--check-steps", type=int, default=400_000, help="budget of the defaults-vs-best runs")
    parser.add_argument("--seeds", type=int, default=3, help="fresh seeds of the defaults-vs-best runs")
    parser.add_argument("--sampler-seed", type=int, default=0)
    parser.add_argument(
        "--pruner",
        default="{name: median, startup_trials: 2, warmup_reports: 2, reports: 20}",
        help="the sweep file's pruner section (docs/sweeps.md)",
    )
    parser.add_argument("--folder", default=None, help="work folder (default: a new temporary one)")
    return parser.parse_args(argv)


def run(command: list[str], cwd: Path) -> str:
    """Run a command of the project's CLI; its output, or SystemExit naming the command and its tail."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def metrics(run_dir: Path) -> list[dict]:
    """The metrics events of a run folder, in order."""
    return [event for event in read_events(events_path(run_dir)) if event.get("type") == "metrics"]


def steps_to(events: list[dict], threshold: float) -> int | None:
    """The step of the first update whose metric reached the threshold; None if none did."""
    for event in events:
        value = event.get(METRIC)
        if value is not None and value >= threshold:
            return int(event["step"])
    return None


def sweep(args: argparse.Namespace, work: Path, base: Path) -> tuple[Path, float, dict]:
    """Run the sweep; (best.yaml, seconds, what its trials spent)."""
    space = work / "sweep_acrobot.yaml"
    space.write_text(
        SPACE.format(base=base, metric=METRIC, budget=args.budget, seed=args.sampler_seed, pruner=args.pruner)
    )
    started = time.perf_counter()
    output = run(
        [sys.executable, "-m", "trainer", "sweep", "--space", str(space), "--trials", str(args.trials),
         "--jobs", str(args.jobs), "--runs-dir", str(work / "runs")],
        cwd=REPO,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    best = Path(output.strip().splitlines()[-1])
    folder = sweep_folder(work / "runs", space.stem)
    study = optuna.load_study(study_name=space.stem, storage=f"sqlite:///{study_path(folder)}")
    states = collections.Counter(trial.state.name for trial in study.trials)
    runs = sorted(trials_folder(folder).iterdir())
    spent = sum(max((event["step"] for event in metrics(run_dir)), default=0) for run_dir in runs)
    return best, seconds, {"trials": len(study.trials), "spent": spent, **states}


def time_to_threshold(config: Path, args: argparse.Namespace, work: Path, label: str) -> list[int | None]:
    """Train `config` on fresh seeds with the check budget; each seed's steps to the threshold."""
    found = []
    for seed in range(1, args.seeds + 1):
        runs = work / f"check-{label}-{seed}"
        run(
            [sys.executable, "-m", "trainer", "--config", str(config), "--set", f"seed={100 + seed}",
             "--set", f"total_timesteps={args.check_steps}", "--set", "checkpoint.interval=0",
             "--runs-dir", str(runs)],
            cwd=REPO,
        )  # fmt: skip
        (run_dir,) = [path for path in runs.iterdir() if path.is_dir()]
        found.append(steps_to(metrics(run_dir), args.threshold))
    return found


def median_steps(found: list[int | None], cap: int) -> float:
    """The median over seeds, a seed that never reached the threshold counting as the cap (a bound)."""
    return statistics.median(cap if steps is None else steps for steps in found)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.folder or tempfile.mkdtemp(prefix="sweep-savings-"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / "acrobot.yaml"
    base.write_text(f"env_name: {args.env}\nalgo: ppo\n")  # the untuned defaults of its kind of actions
    best, seconds, spent = sweep(args, work, base)
    unpruned = spent["trials"] * args.budget
    saved = 1 - spent["spent"] / unpruned
    defaults = time_to_threshold(base, args, work, "defaults")
    tuned = time_to_threshold(best, args, work, "best")
    ratio = median_steps(tuned, args.check_steps) / median_steps(defaults, args.check_steps)
    command = "python -m benchmarks.sweep_savings " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        f"# Sweep savings on {args.env} ({command.strip()})",
        "",
        f"- sweep: {spent['trials']} trials ({spent.get('COMPLETE', 0)} complete, {spent.get('PRUNED', 0)} pruned, "
        f"{spent.get('FAIL', 0)} failed), {args.jobs} at once, {args.budget:,} steps each: {seconds / 60:.1f} min",
        f"- steps spent: {spent['spent']:,} of {unpruned:,} unpruned: pruning saved {saved:.0%}",
        f"- steps to {METRIC} >= {args.threshold:g} (seeds {', '.join(str(100 + s) for s in range(1, args.seeds + 1))}, "
        f"budget {args.check_steps:,}; None: not reached):",
        f"  - untuned defaults: {defaults} (median {median_steps(defaults, args.check_steps):,.0f})",
        f"  - best.yaml: {tuned} (median {median_steps(tuned, args.check_steps):,.0f})",
        f"  - best / defaults: {ratio:.2f}",
        "",
        "best.yaml:",
        "",
        "```yaml",
        best.read_text(encoding="utf-8").strip(),
        "```",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
