"""Regenerate the README's screenshot from a real run, and write its caption from that run.

    python docs/screenshot.py                 # Flappy Bird's shipped config, 60 s in
    python docs/screenshot.py --seconds 90 --game snake

It starts the studio (`python app.py`, on a free port, with a fresh runs folder), starts a run
of the game's shipped config through the studio's API, opens the page in headless Chromium (a
new tab follows the running run), waits, takes `assets/screenshot.png`, and then writes the
caption under the image in README.md and docs/studio.md from the run's own status at that moment
(step, total, speed, the game score). Needs what the browser tests need:
Playwright and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_studio_helpers import CHROMIUM, CHROMIUM_ARGS, start_studio  # noqa: E402  (the tests' studio starter)
from trainer.run.files import atomic_write  # noqa: E402

CAPTIONED = [ROOT / "README.md", ROOT / "docs" / "studio.md"]  # the pages that show the screenshot
IMAGE = ROOT / "assets" / "screenshot.png"
CAPTION = re.compile(r"(!\[[^\]]*\]\((?:\.\./)?assets/screenshot\.png\)\n\n)\*.*?\*\n", re.S)
GAME_TITLES = {"flappy_bird": "Flappy Bird", "snake": "Snake", "cartpole": "CartPole"}


def _millions(steps: float) -> str:
    return f"{steps / 1e6:.1f}M" if steps < 10e6 else f"{steps / 1e6:.0f}M"


def caption(game: str, summary: dict, seconds: float) -> str:
    """The caption, every figure from the run the picture shows."""
    score = (summary.get("last_metrics") or {}).get("recent_score_mean")
    shown_score = f", mean game score {score:.0f}" if isinstance(score, (int, float)) else ""
    cores = os.cpu_count()
    return (
        f"*A {GAME_TITLES.get(game, game)} run {seconds:.0f} s in ({_millions(summary['step'])} of "
        f"{_millions(summary['total_timesteps'])} steps at {summary['fps']:,.0f} steps/s{shown_score}, "
        f"{cores}-core CPU, the shipped config): status line with speed and ETA, the game score climbing, "
        f"the latest rollout GIF, the trainer's log, the PPO diagnostics, downloads and the machine's load.*\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/screenshot.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="flappy_bird", choices=sorted(GAME_TITLES))
    parser.add_argument("--seconds", type=float, default=60.0, help="training time before the picture")
    args = parser.parse_args(argv)
    from gradio_client import Client
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="rl-studio-screenshot-") as scratch:
        server = start_studio(Path(scratch) / "runs", Path(scratch) / "studio.log")
        try:
            client = Client(server.url, verbose=False)
            run = client.predict(args.game, {}, api_name="/start")
            started = time.time()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1500, "height": 1250})
                page.goto(server.url, wait_until="load")
                page.locator("#status").wait_for()
                time.sleep(max(0.0, args.seconds - (time.time() - started)))
                page.wait_for_function("() => document.querySelector('#rollout-gif img')", timeout=60_000)
                summary = client.predict(run["run_id"], api_name="/poll")
                shot = page.screenshot(full_page=False)
                browser.close()
            elapsed = time.time() - started
            client.predict(run["run_id"], api_name="/stop")
        finally:
            server.stop()
    atomic_write(IMAGE, shot)
    for page in CAPTIONED:
        text = page.read_text(encoding="utf-8")
        if not CAPTION.search(text):
            raise SystemExit(f"no screenshot caption found in {page}")
        atomic_write(page, CAPTION.sub(lambda m: m.group(1) + caption(args.game, summary, elapsed), text, count=1))
    print(f"wrote {IMAGE.relative_to(ROOT)} and the caption: {caption(args.game, summary, elapsed).strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
