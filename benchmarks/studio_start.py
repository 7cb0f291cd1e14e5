"""How long does `python app.py` take to start? Seconds from launching the studio's process to its
console line (`RL Studio is running on ...`, studio/ui.py startup_line) and to the page answering
an HTTP GET, each round a fresh process on a free port with an empty runs folder.

    python benchmarks/studio_start.py              # 3 rounds
    python benchmarks/studio_start.py --rounds 5

The first round is the cold one when nothing of torch / gradio is in the OS's file cache yet (the
first start after a boot or an install); the later rounds are warm.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_once(timeout: float = 300.0) -> tuple[float, float, str]:
    """(seconds to the console line, seconds to the page's first answer, the console line)."""
    port = free_port()
    environment = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as runs_dir:
        started = time.perf_counter()
        studio = subprocess.Popen(
            [sys.executable, str(REPO / "app.py"), "--port", str(port), "--runs-dir", runs_dir],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
        )
        try:
            line = ""
            while "RL Studio is running on" not in line:
                line = studio.stdout.readline()
                if not line and studio.poll() is not None:
                    raise RuntimeError(f"the studio exited with {studio.returncode} before its console line")
                if time.perf_counter() - started > timeout:
                    raise TimeoutError("no console line")
            to_line = time.perf_counter() - started
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    time.sleep(0.05)
            return to_line, time.perf_counter() - started, line.strip()
        finally:
            studio.terminate()
            studio.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    lines, pages = [], []
    for round_ in range(args.rounds):
        to_line, to_page, console = start_once()
        lines.append(to_line)
        pages.append(to_page)
        print(f"  round {round_ + 1}: console line after {to_line:.2f} s, page after {to_page:.2f} s", flush=True)
    print(f"  the console line: {console}")
    print("\n| python app.py to | first round | median of all [min-max] |\n|---|---|---|")
    for what, seconds in (("its console line", lines), ("the page answering", pages)):
        print(
            f"| {what} | {seconds[0]:.2f} s | {statistics.median(seconds):.2f} s [{min(seconds):.2f}-{max(seconds):.2f}] |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
