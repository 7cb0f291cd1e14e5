"""How soon does a run started in the studio train? Seconds from `RunManager.start` (what the
Start button calls) to the run's first update in its metrics.jsonl, for trainers forked from the
studio's fork server (the default, `studio.runs.TRAINER_START_METHOD`) and for spawned ones (a
fresh interpreter per run, as the studio did before).

    python benchmarks/run_start.py              # 3 rounds, CartPole
    python benchmarks/run_start.py --rounds 5

Each round runs in a fresh Python process per start method, so every round pays the method's
whole cost: its first run starts the moment the RunManager exists (with the fork server, that
run also waits for the server's own imports, which in the studio happen while the page loads),
its second run is what every later Start costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
METHODS = ("forkserver", "spawn")
RUN = {"env_name": "cartpole", "total_timesteps": 20_000, "gif_interval": 0}


def measure(method: str, runs: int = 2, timeout: float = 120.0) -> dict:
    """In this process: {"seconds": from start() to the first update, for `runs` runs in turn}
    (the `studio_run_start` measurement of benchmarks/contender.py)."""
    from studio.runs import ACTIVE_STATUSES, RunManager

    seconds = []
    with tempfile.TemporaryDirectory() as runs_dir:
        manager = RunManager(runs_dir, start_method=method)
        try:
            for _ in range(runs):
                started = time.perf_counter()
                run_id = manager.start(dict(RUN)).run_id
                while manager.get(run_id).update_count == 0:
                    if time.perf_counter() - started > timeout:
                        raise TimeoutError(f"{method}: no update within {timeout:.0f} s")
                    time.sleep(0.02)
                seconds.append(time.perf_counter() - started)
                while manager.get(run_id).status in ACTIVE_STATUSES:  # one run at a time
                    time.sleep(0.05)
        finally:
            manager.shutdown()
    return {"seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from benchmarks.run import run_in_fresh_process  # the suite's one way to measure in a new process

    results: dict[str, list[list[float]]] = {method: [] for method in METHODS}
    for round_ in range(args.rounds):
        for method in METHODS:  # in turn, so that the machine's mood hits both alike
            result = run_in_fresh_process("studio_run_start", {"method": method}, threads=1, timeout=600.0)
            if "error" in result:
                raise RuntimeError(f"{method}: {result['error']}")
            results[method].append(result["seconds"])
            print(
                f"  round {round_ + 1} {method:<10} first run {results[method][-1][0]:.2f} s, "
                f"next {results[method][-1][1]:.2f} s",
                flush=True,
            )
    print("\n| trainer start | first run after the studio starts | every later run |\n|---|---|---|")
    for method in METHODS:
        first, later = zip(*results[method])
        print(
            f"| {method} | {statistics.median(first):.2f} s [{min(first):.2f}-{max(first):.2f}] "
            f"| {statistics.median(later):.2f} s [{min(later):.2f}-{max(later):.2f}] |"
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
