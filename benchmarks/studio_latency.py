"""How quickly does the studio answer, and how fresh is what it shows?

    python -m benchmarks --only studio_latency
    python benchmarks/studio_latency.py --cold-starts 3 --idle-seconds 60 --watch-seconds 60

- the floor: `python -c "import gradio"` (seconds and CPU seconds), which no studio start beats;
- cold start, `--cold-starts` times: seconds from launching `python app.py` (a free port, an empty
  runs folder) to the page answering an HTTP GET (asked every 50 ms), and the CPU seconds the
  process used by then (what a loaded machine stretches; the load average is written beside it);
- idle CPU: the last studio's CPU use (and its children's) over `--idle-seconds`, no page, no run;
- then a headless Chromium tab opens the page, waits for it to load, and presses Start on the game
  a new page opens on (Flappy Bird, its shipped config). An observer in the page (a
  MutationObserver) stamps, on the page's clock, the click, the 'Started' message, the reward
  chart's first point and each new rollout picture (its src set, then its image loaded): nothing is
  polled, so the times are as the page lived them. The first picture is compared with the
  trainer's file (its mtime): "shown within X s of the trainer writing it";
- for `--watch-seconds` of training, the age the caption states each second: its largest value.

Prints one line per figure and writes benchmarks/results/studio_latency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.studio_overhead import CHROMIUM_ARGS, ENV  # noqa: E402
from trainer.cluster.launch import free_port  # noqa: E402
from trainer.run.layout import ROLLOUTS_DIR  # noqa: E402

COMMAND = "python -m benchmarks --only studio_latency"
ANSWER_POLL_SECONDS = 0.05
CAPTION_AGE = r"""() => { const found = document.querySelector('#rollout-caption').innerText
                                .match(/at step ([\d,]+), recorded (\d+) s ago/);
                           return found ? Number(found[2]) : null; }"""

# Installed in the page after it has loaded, before Start is pressed: window.__seen collects the
# moments (epoch milliseconds: performance.timeOrigin + performance.now()) as the DOM changes.
OBSERVER = """() => {
  const now = () => performance.timeOrigin + performance.now();
  const seen = window.__seen = {click: null, started: null, firstPoint: null, pictures: []};
  document.querySelector('#start').addEventListener('click', () => { seen.click ??= now(); }, true);
  let shown = null;
  const look = () => {
    const image = document.querySelector('#rollout-gif img');
    if (image && image.src.includes('.gif') && image.src !== shown) {
      shown = image.src;
      const picture = {src: image.src, set: now(), loaded: null};
      seen.pictures.push(picture);
      const loaded = () => { picture.loaded ??= now(); };
      if (image.complete && image.naturalWidth) loaded(); else image.addEventListener('load', loaded, {once: true});
    }
    if (seen.firstPoint === null) {
      const chart = document.querySelector('#reward-plot .js-plotly-plot');
      if (chart && chart._fullData && chart._fullData.length && chart._fullData[0]._length > 0) seen.firstPoint = now();
    }
    if (seen.started === null && seen.click !== null) {
      const message = document.querySelector('#train-message');
      if (message && message.textContent.includes('Started')) seen.started = now();
    }
  };
  new MutationObserver(look).observe(document.body,
    {subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ['src']});
  look();
}"""


def cpu_seconds(process: psutil.Process, children: bool = True) -> float:
    total = 0.0
    for each in [process, *(process.children(recursive=True) if children else [])]:
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


def import_floor() -> dict[str, float]:
    """`python -c "import gradio"`: seconds and CPU seconds."""
    code = "import gradio, resource; u = resource.getrusage(resource.RUSAGE_SELF); print(u.ru_utime + u.ru_stime)"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
    return {"seconds": time.perf_counter() - started, "cpu_seconds": float(done.stdout.split()[-1])}


def cold_start(runs_dir: Path) -> tuple[subprocess.Popen, str, dict[str, float]]:
    """Launch `python app.py`; return it, its URL, and the seconds and CPU seconds to the page answering."""
    port, load = free_port(), os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port), "--runs-dir", str(runs_dir), "--poll-seconds", "1.0"],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url, studio = f"http://127.0.0.1:{port}", psutil.Process(process.pid)
    while time.perf_counter() - started < 300:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            seconds = time.perf_counter() - started
            return process, url, {"seconds": seconds, "cpu_seconds": cpu_seconds(studio), "load_average": load}
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(ANSWER_POLL_SECONDS)
    stop(process)
    raise RuntimeError("the studio did not answer")


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)


def written_at(runs_dir: Path, src: str) -> float | None:
    """When the trainer wrote the GIF a picture's src names (the file's mtime), None if not found."""
    name = Path(urllib.parse.unquote(urllib.parse.urlparse(src).path)).name
    found = list(runs_dir.glob(f"*/{ROLLOUTS_DIR}/{name}"))
    return found[0].stat().st_mtime if found else None


def watch_training(page, runs_dir: Path, watch_seconds: float) -> dict[str, Any]:
    """Press Start on the loaded page (observer installed first); the moments the page saw."""
    page.evaluate(OBSERVER)
    page.locator("#start").click()
    deadline = time.time() + 180
    seen = page.evaluate("() => window.__seen")
    while time.time() < deadline and not (seen["firstPoint"] and seen["pictures"] and seen["pictures"][0]["loaded"]):
        time.sleep(0.5)
        seen = page.evaluate("() => window.__seen")
    click = seen["click"] / 1000.0

    def after_click(moment: float | None) -> float | None:
        return None if moment is None else moment / 1000.0 - click

    result: dict[str, Any] = {
        "start_to_started_message_seconds": after_click(seen["started"]),
        "start_to_first_chart_point_seconds": after_click(seen["firstPoint"]),
    }
    if seen["pictures"]:
        first = seen["pictures"][0]
        written = written_at(runs_dir, first["src"])
        result["start_to_first_picture_seconds"] = after_click(first["loaded"])
        if written is not None:
            result["start_to_first_picture_written_seconds"] = written - click
            result["picture_written_to_src_seconds"] = first["set"] / 1000.0 - written
            if first["loaded"] is not None:
                result["picture_written_to_shown_seconds"] = first["loaded"] / 1000.0 - written
    ages: list[int] = []
    watch_end = time.time() + watch_seconds
    while time.time() < watch_end:
        age = page.evaluate(CAPTION_AGE)
        if age is not None:
            ages.append(int(age))
        time.sleep(1.0)
    result["largest_caption_age_seconds"] = max(ages) if ages else None
    seen = page.evaluate("() => window.__seen")
    shown = [p for p in seen["pictures"] if p["loaded"] is not None]
    delays = [p["loaded"] / 1000.0 - w for p in shown if (w := written_at(runs_dir, p["src"])) is not None]
    result["pictures_shown"] = len(delays)
    result["largest_written_to_shown_seconds"] = max(delays) if delays else None
    return result


def measure(idle_seconds: float, watch_seconds: float, cold_starts: int = 3) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    result: dict[str, Any] = {"cpu_cores": psutil.cpu_count(), "import_gradio": [import_floor() for _ in range(3)]}
    with tempfile.TemporaryDirectory(prefix="studio-latency-") as folder:
        runs_dir = Path(folder) / "runs"
        result["cold_starts"] = []
        for attempt in range(max(1, cold_starts)):
            process, url, figures = cold_start(runs_dir)
            result["cold_starts"].append(figures)
            if attempt < cold_starts - 1:
                stop(process)
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
                page.locator("#rollout-gif").wait_for()
                result["game"] = page.locator("#field-env-name input").input_value()
                result.update(watch_training(page, runs_dir, watch_seconds))
                chromium.close()
        finally:
            stop(process)
    return result


def report_lines(result: dict[str, Any]) -> list[str]:
    def seconds(key: str) -> str:
        value = result.get(key)
        return "-" if value is None else f"{value:.1f} s"

    def runs(rows: list[dict]) -> str:
        each = ", ".join(f"{row['seconds']:.1f} s ({row['cpu_seconds']:.1f} s CPU)" for row in rows)
        return f"median {statistics.median(row['seconds'] for row in rows):.1f} s: {each}"

    load = ", ".join(f"{row['load_average']:.1f}" for row in result["cold_starts"])
    return [
        f"studio latency ({result['cpu_cores']} CPU cores; game on a new page: {result.get('game')})",
        f"  python -c 'import gradio'    : {runs(result['import_gradio'])}",
        f"  cold start to answering page : {runs(result['cold_starts'])} (load average {load})",
        f"  idle CPU (no page, no run)   : {result['idle_cpu_percent']:.2f}% of a core",
        f"  Start to 'Started' message   : {seconds('start_to_started_message_seconds')}",
        f"  Start to first chart point   : {seconds('start_to_first_chart_point_seconds')}",
        f"  Start to first picture shown : {seconds('start_to_first_picture_seconds')} "
        f"(the trainer wrote it {seconds('start_to_first_picture_written_seconds')} after Start)",
        f"  first picture shown within   : {seconds('picture_written_to_shown_seconds')} of the trainer writing it",
        f"  every picture shown within   : {seconds('largest_written_to_shown_seconds')} of being written "
        f"({result.get('pictures_shown', 0)} pictures)",
        f"  oldest picture while training: {seconds('largest_caption_age_seconds')} (caption's stated age)",
    ]


def run_studio_latency(
    idle_seconds: float = 60.0, watch_seconds: float = 60.0, out: Path | None = None, cold_starts: int = 3
) -> dict:
    """What `python -m benchmarks --only studio_latency` runs: measure, print, write the JSON."""
    result = measure(idle_seconds, watch_seconds, cold_starts)
    result["command"] = COMMAND
    print("\n".join(report_lines(result)), flush=True)
    out = out or REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "studio_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold-starts", type=int, default=3, help="cold starts measured (default 3)")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle CPU window (default 60 s)")
    parser.add_argument("--watch-seconds", type=float, default=60.0, help="training watched for the caption's age")
    args = parser.parse_args()
    run_studio_latency(args.idle_seconds, args.watch_seconds, cold_starts=args.cold_starts)


if __name__ == "__main__":
    main()
