"""How quickly does the studio answer, and how fresh is what it shows?

    python -m benchmarks --only studio_latency
    python benchmarks/studio_latency.py --idle-seconds 60 --watch-seconds 60

One `python app.py` process on a free port with an empty runs folder:

- cold start: seconds from launching it to the page answering an HTTP GET;
- idle CPU: its CPU use (and its children's) over `--idle-seconds` with no page and no run;
- then a headless Chromium tab presses Start on the game a new page opens on (Flappy Bird, its
  shipped config): seconds from the click to the first point on the reward chart and to the first
  rollout picture on the page, and how long after the trainer wrote that picture the page showed it;
- for `--watch-seconds` of training, the age the caption states each second (the picture shown
  against the status line): its largest value.

Prints one line per figure and writes benchmarks/results/studio_latency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.studio_overhead import CHROMIUM_ARGS, REWARD_POINTS, start_studio  # noqa: E402
from trainer.run.events import read_events  # noqa: E402
from trainer.run.layout import events_path  # noqa: E402

GIF_SHOWN = """() => { const image = document.querySelector('#rollout-gif img');
                      return Boolean(image && image.src.includes('.gif') && image.complete && image.naturalWidth); }"""
CAPTION = re.compile(r"at step ([\d,]+), recorded (\d+) s ago")


def cpu_seconds(process: psutil.Process) -> float:
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        try:
            times = each.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def settle(process: psutil.Process, window: float = 3.0, most: float = 90.0) -> None:
    """Wait (at most `most` seconds) until the process and its children used under 5% of a core
    over `window` seconds: the work a start leaves behind is over."""
    deadline = time.time() + most
    while time.time() < deadline:
        before = cpu_seconds(process)
        time.sleep(window)
        if cpu_seconds(process) - before < 0.05 * window:
            return


def first_gif_written(runs_dir: Path) -> float | None:
    """time.time() the trainer wrote its first rollout GIF (its gif event), None before."""
    for run_dir in runs_dir.iterdir():
        for event in read_events(events_path(run_dir)):
            if event.get("type") == "gif":
                return float(event["time"])
    return None


def measure(idle_seconds: float, watch_seconds: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    result: dict[str, Any] = {"cpu_cores": psutil.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="studio-latency-") as folder:
        runs_dir = Path(folder) / "runs"
        launched = time.time()
        process, url = start_studio(runs_dir, poll_seconds=1.0)
        result["cold_start_seconds"] = time.time() - launched
        try:
            studio = psutil.Process(process.pid)
            settle(studio)  # the fork server's imports and the charts' warm-up are done
            before, started = cpu_seconds(studio), time.time()
            time.sleep(idle_seconds)
            result["idle_cpu_percent"] = 100.0 * (cpu_seconds(studio) - before) / (time.time() - started)
            with sync_playwright() as playwright:
                chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = chromium.new_page(viewport={"width": 1500, "height": 1000})
                page.goto(url, wait_until="load")
                page.locator("#start").wait_for()
                result["game"] = page.locator("#field-env-name input").input_value()
                clicked = time.time()
                page.locator("#start").click()
                started = chart = picture = None
                ages: list[int] = []
                while time.time() - clicked < 180 and (chart is None or picture is None):
                    if started is None and "Started" in page.locator("#train-message").inner_text():
                        started = time.time() - clicked
                    if chart is None and page.evaluate(REWARD_POINTS) > 0:
                        chart = time.time() - clicked
                    if picture is None and page.evaluate(GIF_SHOWN):
                        picture = time.time()
                    time.sleep(0.1)
                written = first_gif_written(runs_dir)
                result["start_to_started_message_seconds"] = started
                result["start_to_first_chart_point_seconds"] = chart
                result["start_to_first_picture_seconds"] = None if picture is None else picture - clicked
                result["picture_written_to_shown_seconds"] = (
                    None if picture is None or written is None else picture - written
                )
                watch_end = time.time() + watch_seconds
                while time.time() < watch_end:
                    found = CAPTION.search(page.locator("#rollout-caption").inner_text())
                    if found:
                        ages.append(int(found.group(2)))
                    time.sleep(1.0)
                result["largest_caption_age_seconds"] = max(ages) if ages else None
                chromium.close()
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
    return result


def report_lines(result: dict[str, Any]) -> list[str]:
    def seconds(key: str) -> str:
        value = result.get(key)
        return "-" if value is None else f"{value:.1f} s"

    return [
        f"studio latency ({result['cpu_cores']} CPU cores; game on a new page: {result.get('game')})",
        f"  cold start to answering page : {seconds('cold_start_seconds')}",
        f"  idle CPU (no page, no run)   : {result['idle_cpu_percent']:.2f}% of a core",
        f"  Start to 'Started' message   : {seconds('start_to_started_message_seconds')}",
        f"  Start to first chart point   : {seconds('start_to_first_chart_point_seconds')}",
        f"  Start to first picture       : {seconds('start_to_first_picture_seconds')}",
        f"  picture written to shown     : {seconds('picture_written_to_shown_seconds')}",
        f"  oldest picture while training: {seconds('largest_caption_age_seconds')} (caption's stated age)",
    ]


def run_studio_latency(idle_seconds: float = 60.0, watch_seconds: float = 60.0, out: Path | None = None) -> dict:
    """What `python -m benchmarks --only studio_latency` runs: measure, print, write the JSON."""
    result = measure(idle_seconds, watch_seconds)
    result["command"] = "python -m benchmarks --only studio_latency"
    print("\n".join(report_lines(result)), flush=True)
    out = out or REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "studio_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle CPU window (default 60 s)")
    parser.add_argument("--watch-seconds", type=float, default=60.0, help="training watched for the caption's age")
    args = parser.parse_args()
    run_studio_latency(args.idle_seconds, args.watch_seconds)


if __name__ == "__main__":
    main()
