"""The Train tab's live view in headless Chromium: a new page opens on Flappy Bird with its shipped
config, and after Start the rollout picture follows the training, its caption saying how old it is.

The trainer records a rollout every `gif_interval` seconds (trainer/run/gif.py GifSchedule: the
budget cuts a GIF shorter, never later); each tick of the page reads what the run's event file
gained, so a new picture is on the page within a poll or two of being written. Figures (Start to
first picture, the oldest picture while training): `python -m benchmarks --only studio_latency`.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from test_studio_helpers import studio_page

pytestmark = pytest.mark.browser

CAPTION = re.compile(r"Rollout at step ([\d,]+), recorded (\d+) s ago")
POLL_SECONDS = 1.0  # the studio's --poll-seconds default
WATCH_SECONDS = 30.0  # three GIF intervals of training
STALE_SECONDS = 20  # the bound: the picture never more than 20 s of training behind


def caption_reading(page) -> tuple[int, int] | None:
    """(step, stated age in seconds) of the caption under the rollout picture, None before one."""
    found = CAPTION.search(page.locator("#rollout-caption").inner_text())
    return (int(found.group(1).replace(",", "")), int(found.group(2))) if found else None


def gif_events(runs_dir) -> list[dict]:
    events = []
    for events_file in runs_dir.glob("*/metrics.jsonl"):
        events += [json.loads(line) for line in events_file.read_text().splitlines() if '"gif"' in line]
    return [event for event in events if event.get("type") == "gif"]


def test_a_new_page_opens_on_flappy_bird_with_its_shipped_config(tmp_path):
    from studio.form import tuned_config

    shipped = tuned_config("flappy_bird")
    with studio_page(tmp_path, 1500, 1100) as (_, page):
        assert page.locator("#field-env-name input").input_value() == "flappy_bird"
        assert page.locator("#field-model-type input").input_value() == shipped["model_type"]
        for key in ("seed", "total_timesteps", "num_envs"):  # the form's first fields (the rest: Advanced)
            box = page.locator(f"#field-{key.replace('_', '-')} input")
            assert float(box.input_value()) == float(shipped[key]), key


def test_the_picture_follows_the_training_and_says_how_old_it_is(tmp_path):
    with studio_page(tmp_path, 1500, 1100) as (server, page):
        page.locator("#start").click()  # Flappy Bird, as shipped
        page.wait_for_function(
            "() => /recorded \\d+ s ago/.test(document.querySelector('#rollout-caption').innerText)", timeout=180_000
        )
        step, age = caption_reading(page)
        (first,) = [event for event in gif_events(server.runs_dir) if event["step"] == step]
        # The caption counts from when the episode began: the recording's own seconds, then the
        # page's delay, at most three polls (a loaded 2-core CI once missed one: 4 s against 3.97)
        # and a second of rounding.
        assert age <= first["seconds"] + 3 * POLL_SECONDS + 1, f"the first picture came late: {age} s old"

        readings = []
        watch_end = time.time() + WATCH_SECONDS
        while time.time() < watch_end:
            readings.append(caption_reading(page))
            time.sleep(POLL_SECONDS)
        steps = [reading[0] for reading in readings if reading]
        ages = [reading[1] for reading in readings if reading]
        assert len(set(steps)) >= 2, f"no new picture in {WATCH_SECONDS:.0f} s of training: {readings}"
        assert max(ages) < STALE_SECONDS, f"the picture fell {max(ages)} s behind the training: {readings}"
        page.locator("#stop").click()
