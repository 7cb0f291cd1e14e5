"""Does watching a run in the studio slow the training down?

Trains the same config twice per round: headless (`python -m trainer`) and from the studio
(`python app.py`): a headless Chromium tab pastes the config into the YAML box, presses Start and
keeps showing the live view (polled every second: status, charts, GIF, log, machine load). Prints the training speed of
each, as the trainer measures it (steps / training seconds, from metrics.jsonl), and the ratio.

    python benchmarks/studio_overhead.py                      # CartPole's tuned config, 2 rounds
    python benchmarks/studio_overhead.py --config configs/flappy_bird.yaml --total-timesteps 1000000
    python benchmarks/studio_overhead.py --no-browser --clients 3   # API pollers instead of a browser

Goal: the studio run keeps at least 90% of the headless speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainer.cluster.launch import free_port  # noqa: E402  (after the path: the script runs from any folder)
from trainer.run.layout import events_path, log_path  # noqa: E402

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ENV = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", SDL_VIDEODRIVER="dummy")


def training_speed(run_dir: Path) -> tuple[float, int, float]:
    """(steps per second of training, steps, training seconds) from the run's last metrics event."""
    last = None
    for line in events_path(run_dir).read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "metrics":
            last = event
    if last is None:
        raise RuntimeError(f"{run_dir} has no metrics: the run failed? See {log_path(run_dir)}")
    return last["step"] / last["elapsed"], last["step"], last["elapsed"]


def run_headless(config_path: Path, settings: dict, run_dir: Path) -> tuple[float, int, float]:
    command = [sys.executable, "-m", "trainer", "--config", str(config_path), "--run-dir", str(run_dir), "--quiet"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    subprocess.run(command, cwd=REPO, env=ENV, check=True)
    return training_speed(run_dir)


def start_studio(runs_dir: Path, poll_seconds: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "app.py",
            "--port",
            str(port),
            "--runs-dir",
            str(runs_dir),
            "--poll-seconds",
            str(poll_seconds),
        ],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=2)
            return process, url
        except OSError:
            time.sleep(0.3)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("the studio did not start")


def watch_with_client(url: str, run_id: str, finished: threading.Event, polls: list) -> None:
    from gradio_client import Client

    client = Client(url, verbose=False)
    while not finished.is_set():
        polls.append(client.predict(run_id, api_name="/poll")["updates"])
        time.sleep(1.0)


def browser_cpu_seconds() -> float:
    """CPU seconds used so far by the Chromium processes this script started."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            if "chrom" in child.name().lower():
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            pass
    return total


def start_in_page(page, config_text: str) -> str:
    """Paste the config into the YAML box, load it into the form, press Start: the run id."""
    page.get_by_text("YAML config", exact=True).click()
    page.locator("#yaml-box .cm-content").fill(config_text)
    page.locator("#load-yaml").click()
    page.wait_for_function("() => document.querySelector('#train-message').innerText.includes('Loaded')")
    page.locator("#start").click()
    page.wait_for_function("() => document.querySelector('#train-message').innerText.includes('Started')")
    return re.search(r"Started (\S+)\.", page.locator("#train-message").inner_text()).group(1)


REWARD_POINTS = """() => { const gd = document.querySelector('#reward-plot .js-plotly-plot');
                          return gd && gd._fullData && gd._fullData.length ? gd._fullData[0]._length : 0; }"""


def run_in_studio(config: dict, runs_dir: Path, browser: bool, clients: int, poll_seconds: float) -> dict:
    """One run started from the studio (in the page when `browser`), watched until it ends."""
    from gradio_client import Client

    process, url = start_studio(runs_dir, poll_seconds)
    try:
        with contextlib.ExitStack() as stack:
            client = Client(url, verbose=False)
            page = None
            if browser:
                from playwright.sync_api import sync_playwright

                playwright = stack.enter_context(sync_playwright())
                chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                stack.callback(chromium.close)
                page = chromium.new_page(viewport={"width": 1500, "height": 1000})
                page.goto(url)
                page.locator("#start").wait_for()
            browser_before = browser_cpu_seconds()
            studio_before = _cpu_seconds(psutil.Process(process.pid))
            started = time.time()
            if page is not None:
                run_id = start_in_page(page, yaml.safe_dump(config, sort_keys=False))
            else:
                run_id = client.predict(config["env_name"], config, api_name="/start")["run_id"]
            finished, polls = threading.Event(), []
            pollers = [
                threading.Thread(target=watch_with_client, args=(url, run_id, finished, polls)) for _ in range(clients)
            ]
            for poller in pollers:
                poller.start()
            points = 0
            while client.predict(run_id, api_name="/poll")["status"] in ("starting", "running", "stopping"):
                if page is not None:
                    points = page.evaluate(REWARD_POINTS)
                time.sleep(1.0)
            seconds = time.time() - started
            studio_cpu = (_cpu_seconds(psutil.Process(process.pid)) - studio_before) / seconds
            browser_cpu = (browser_cpu_seconds() - browser_before) / seconds
            finished.set()
            for poller in pollers:
                poller.join(30)
        speed, steps, elapsed = training_speed(runs_dir / run_id)
        return {
            "speed": speed,
            "steps": steps,
            "elapsed": elapsed,
            "studio_cpu": studio_cpu,
            "browser_cpu": browser_cpu,
            "api_polls": len(polls),
            "reward_points": points,
        }
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/cartpole.yaml")
    parser.add_argument("--total-timesteps", type=int, default=600_000)
    parser.add_argument("--repeats", type=int, default=2, help="rounds (each: headless, then studio)")
    parser.add_argument("--no-browser", action="store_true", help="no Chromium tab watching the run")
    parser.add_argument("--clients", type=int, default=0, help="gradio_client pollers (1 poll/s each)")
    parser.add_argument("--poll-seconds", type=float, default=1.0, help="the studio's --poll-seconds")
    args = parser.parse_args()

    config_path = (REPO / args.config).resolve()
    config = yaml.safe_load(config_path.read_text())
    settings = {"total_timesteps": args.total_timesteps}
    headless, studio = [], []
    with tempfile.TemporaryDirectory(prefix="studio-overhead-") as folder:
        for round_number in range(1, args.repeats + 1):
            speed, steps, elapsed = run_headless(config_path, settings, Path(folder) / f"headless-{round_number}")
            headless.append(speed)
            print(
                f"round {round_number} headless: {speed:,.0f} steps/s ({steps:,} steps in {elapsed:.1f} s)", flush=True
            )
            result = run_in_studio(
                {**config, **settings},
                Path(folder) / f"studio-{round_number}",
                browser=not args.no_browser,
                clients=args.clients,
                poll_seconds=args.poll_seconds,
            )
            studio.append(result["speed"])
            print(
                f"round {round_number} studio:   {result['speed']:,.0f} steps/s ({result['steps']:,} steps in "
                f"{result['elapsed']:.1f} s); CPU: studio server {result['studio_cpu'] * 100:.0f}% of a core, "
                f"browser {result['browser_cpu'] * 100:.0f}%; reward chart showed {result['reward_points']} points",
                flush=True,
            )
    watchers = ("a Chromium tab" if not args.no_browser else "no browser") + (
        f" + {args.clients} API pollers" if args.clients else ""
    )
    headless_speed, studio_speed = statistics.median(headless), statistics.median(studio)
    print()
    print(
        f"config {args.config}, {args.total_timesteps:,} steps, {args.repeats} rounds, watched by {watchers} "
        f"(studio polls every {args.poll_seconds:g} s); "
        f"{psutil.cpu_count()} CPU cores"
    )
    print(f"headless : {headless_speed:>10,.0f} steps/s (median)")
    print(f"studio   : {studio_speed:>10,.0f} steps/s (median)")
    print(f"ratio    : {studio_speed / headless_speed:>10.1%}  (goal >= 90%)")


if __name__ == "__main__":
    main()
