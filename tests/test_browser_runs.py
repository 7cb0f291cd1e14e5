"""The Runs tab in headless Chromium while a run trains.

One finished run is in the runs folder when the studio starts; a second run starts afterwards
in a process of its own (as `python -m trainer` would: it owns the folder and appends to its
metrics.jsonl; the studio only reads). Opening the Runs tab finds it, ticking both runs in
Compare draws two curves, and the training one keeps moving: its curve gains points and its
status line's step grows between two reads, with no click in between.
"""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time

import pytest

from test_studio_helpers import studio_page
from test_studio_runs import CONFIG, fake_trainer
from trainer.run.layout import create_run_dir, write_config

pytestmark = pytest.mark.browser

# Plotly's own view of the Runs tab's reward chart: run name -> points of its smoothed curve.
CURVES = """() => {
  const plot = document.querySelector('#runs-reward-plot .js-plotly-plot');
  if (!plot || !plot._fullData) return {};
  const curves = {};
  for (const trace of plot._fullData) {
    if (!String(trace.name).endsWith('(raw)')) curves[trace.name] = trace._length || 0;
  }
  return curves;
}"""
# The step the Runs tab's status line shows ("step 12.3k"; the exact count is its title).
STATUS_STEP = """() => {
  const step = document.querySelector('#runs-status .facts span[title]');
  return step ? Number(step.title.replace(/,/g, '')) : -1;
}"""


def test_compare_a_finished_and_a_training_run_and_watch_the_training_one_move(tmp_path):
    began = time.time()
    finished_dir = create_run_dir(CONFIG, tmp_path / "runs")  # studio_page serves tmp_path / "runs"
    write_config(finished_dir, CONFIG)
    fake_trainer(CONFIG, str(finished_dir), None, threading.Event(), False)
    training_config = {**CONFIG, "seed": 2}
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    with studio_page(tmp_path, 1400, 1100) as (server, page):
        print(f"studio and page up after {time.time() - began:.0f} s")
        training_dir = create_run_dir(training_config, server.runs_dir)
        write_config(training_dir, training_config)
        trainer = context.Process(
            target=functools.partial(fake_trainer, delay=0.25, forever=True),
            args=(training_config, str(training_dir), None, stop, False),
        )
        trainer.start()
        finished, training = finished_dir.name, training_dir.name
        try:
            page.get_by_role("tab", name="Runs").click()
            # Both runs are listed, the one started after the page was opened included.
            for run_id in (finished, training):
                page.locator("#compare label", has_text=run_id).wait_for(timeout=60_000)
            page.locator("#runs-table", has_text=training).wait_for()
            page.locator("#compare label", has_text=finished).click()
            page.locator("#compare label", has_text=training).click()

            page.wait_for_function(
                f"() => {{ const c = ({CURVES})(); return (c['{finished}'] || 0) > 0 && (c['{training}'] || 0) > 0; }}",
                timeout=60_000,
            )
            curves = page.evaluate(CURVES)
            print(f"two curves after {time.time() - began:.0f} s")
            assert set(curves) == {finished, training}, curves
            page.locator("#compare-note", has_text="1 setting(s) differ").wait_for()
            assert "seed" in page.locator("#config-diff").inner_text()

            # The training run keeps moving by itself: more points, a later step.
            first_points, first_step = curves[training], page.evaluate(STATUS_STEP)
            assert first_step > 0
            page.wait_for_function(
                f"() => (({CURVES})()['{training}'] || 0) > {first_points} && ({STATUS_STEP})() > {first_step}",
                timeout=60_000,
            )
            later = page.evaluate(CURVES)
            print(f"the training run moved after {time.time() - began:.0f} s")
            assert later[finished] == curves[finished]  # the finished run stays as it was
            assert "training" in page.locator("#runs-status").inner_text()
            page.screenshot(path=str(tmp_path / "runs-compare.png"), full_page=True)
        finally:
            stop.set()
            trainer.join(30)
