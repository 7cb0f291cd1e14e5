"""Does watching an agent play (the studio's Watch tab) slow a training run down?

Trains the same config headless (`python -m trainer`) in rounds, alternately alone and with the
Watch tab's player streaming a run's agent at its game's frame rate in this process (the
studio's process in real use), and compares the trainer's own speed (steps / training second,
from metrics.jsonl).

    python benchmarks/watch_overhead.py                         # CartPole, 2 rounds each
    python benchmarks/watch_overhead.py --watch flappy_bird --rounds 3 --total-timesteps 300000

Goal: the watched run keeps at least 95% of the alone speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainer.run.layout import events_path  # noqa: E402  (after the path: the script runs from any folder)


def train_speed(config: str, total: int, run_dir: Path) -> float:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--config",
            config,
            "--run-dir",
            str(run_dir),
            "-q",
            "--set",
            f"total_timesteps={total}",
            "--set",
            "gif_interval=0",
            "--set",
            "device=cpu",
            "--set",
            "checkpoint.interval=0",
        ],
        cwd=REPO,
        check=True,
        env={**os.environ, "SDL_VIDEODRIVER": "dummy"},
    )
    rows = [json.loads(line) for line in events_path(run_dir).read_text().splitlines()]
    last = [row for row in rows if row.get("type") == "metrics"][-1]
    return last["step"] / last["elapsed"]


def watched_run(env_name: str, folder: Path) -> Path:
    """A short run of `env_name` whose final model the player shows."""
    run_dir = folder / f"watched-{env_name}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--set",
            f"env_name={env_name}",
            "--set",
            "num_envs=8",
            "--set",
            "total_timesteps=4096",
            "--set",
            "gif_interval=0",
            "--set",
            "device=cpu",
            "--run-dir",
            str(run_dir),
            "-q",
        ],
        cwd=REPO,
        check=True,
        env={**os.environ, "SDL_VIDEODRIVER": "dummy"},
    )
    return run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/cartpole.yaml")
    parser.add_argument("--total-timesteps", type=int, default=150_000)
    parser.add_argument("--watch", default="cartpole", help="the game shown while training (default cartpole)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    from studio.watch import LivePlayer, stream_frames

    with tempfile.TemporaryDirectory() as folder:
        shown = watched_run(args.watch, Path(folder))
        speeds: dict[str, list[float]] = {"alone": [], "watched": []}
        frames_shown: list[float] = []
        for round_index in range(args.rounds):
            for mode in ("alone", "watched"):
                stop = threading.Event()
                counter = [0, time.monotonic()]

                def watch(counter=counter, stop=stop) -> None:
                    stream = stream_frames(LivePlayer(shown))
                    for _ in stream:
                        if counter[0] == 0:
                            counter[1] = time.monotonic()  # from the first frame (loading is not showing)
                        counter[0] += 1
                        if stop.is_set():
                            stream.close()
                            return

                watcher = threading.Thread(target=watch, daemon=True) if mode == "watched" else None
                if watcher is not None:
                    watcher.start()
                speed = train_speed(args.config, args.total_timesteps, Path(folder) / f"{mode}-{round_index}")
                stop.set()
                if watcher is not None:
                    watcher.join(10)
                    frames_shown.append(counter[0] / (time.monotonic() - counter[1]))
                speeds[mode].append(speed)
                print(
                    f"round {round_index + 1} {mode:>7}: {speed:8.0f} steps/s"
                    + (f"  (watch view at {frames_shown[-1]:.1f} fps)" if watcher is not None else ""),
                    flush=True,
                )
    alone, watched = statistics.median(speeds["alone"]), statistics.median(speeds["watched"])
    print(
        f"\nmedian: alone {alone:.0f} steps/s, watched {watched:.0f} steps/s -> {watched / alone:.1%} of the speed; "
        f"the view ran at {statistics.fmean(frames_shown):.1f} fps"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
