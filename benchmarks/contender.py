"""One benchmark measurement in a fresh process: `python -m benchmarks.contender SPEC RESULT`.

SPEC is a JSON file `{"kind": ..., "params": {...}, "threads": N, "launched_at": unix_time}`;
the result (a JSON object) is written atomically to RESULT. Running every contender in its own
process keeps them from sharing warm caches or imported modules, and lets the parent measure
time from process launch honestly: it writes `launched_at` right before starting this process,
and a result's `solve_unix_time` minus it is the seconds a user would wait from `python ...`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

KINDS = (
    "sb3_throughput",
    "sb3_time_to_solve",
    "ours_throughput",
    "ours_time_to_solve",
    "ours_game",
    "ours_ceiling",
    "studio_run_start",
    "ours_off_policy",
    "sb3_off_policy",
    "ours_shipped_game",
)


def set_threads(threads: int) -> None:
    """The same torch thread count for every contender (set before any torch work)."""
    import torch

    torch.set_num_threads(threads)


def run_measurement(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """Dispatch to the measurement function of `kind` (imported lazily: SB3 is slow to import)."""
    if kind == "sb3_throughput":
        from benchmarks.sb3_peer import sb3_throughput

        return sb3_throughput(**params)
    if kind == "sb3_time_to_solve":
        from benchmarks.sb3_peer import sb3_time_to_solve

        return sb3_time_to_solve(**params)
    if kind == "ours_throughput":
        from benchmarks.ours import ours_throughput

        return ours_throughput(**params)
    if kind == "ours_time_to_solve":
        from benchmarks.ours import ours_time_to_solve

        return ours_time_to_solve(**params)
    if kind == "ours_game":
        from benchmarks.ours import ours_game

        return ours_game(**params)
    if kind == "ours_ceiling":
        from benchmarks.ours import ours_ceiling

        return ours_ceiling(**params)
    if kind == "ours_off_policy":
        from benchmarks.off_policy import ours_off_policy

        return ours_off_policy(**params)
    if kind == "sb3_off_policy":
        from benchmarks.sb3_off_policy import sb3_off_policy

        return sb3_off_policy(**params)
    if kind == "ours_shipped_game":
        from benchmarks.games import ours_shipped_game

        return ours_shipped_game(**params)
    if kind == "studio_run_start":
        from benchmarks.run_start import measure

        return measure(**params)
    raise ValueError(f"unknown benchmark kind {kind!r}; expected one of {', '.join(KINDS)}")


def write_json_atomic(path: Path, data: Any) -> None:
    from trainer.run.files import atomic_write  # the project's one atomic write

    atomic_write(path, json.dumps(data, indent=1))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.contender SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    set_threads(int(spec.get("threads", 1)))
    started = time.time()
    result = run_measurement(spec["kind"], spec.get("params", {}))
    result["process_start_unix_time"] = started
    launched_at = spec.get("launched_at")
    if launched_at is not None and result.get("solve_unix_time") is not None:
        result["solve_since_launch"] = result["solve_unix_time"] - launched_at
    if launched_at is not None and result.get("solve_unix_times"):
        result["solve_since_launch_by_target"] = {
            target: (unix - launched_at if unix is not None else None)
            for target, unix in result["solve_unix_times"].items()
        }
    write_json_atomic(Path(argv[1]), result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
