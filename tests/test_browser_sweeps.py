"""The Sweeps tab in headless Chromium: a tiny CartPole sweep built in the tab's form (the shipped
config, learning_rate over its prefilled range, one update a trial) starts with Start, and the
trials table fills with its finished trials, the curves chart with their curves and Optuna's
parallel-coordinate plot with its lines; then the best trial's config goes into the Train form."""

from __future__ import annotations

import time

import pytest

from test_studio_helpers import studio_page

pytestmark = pytest.mark.browser

# Traces plotly drew in the chart under `selector` (0 while it shows only its waiting note).
TRACES = """(selector) => {
  const plot = document.querySelector(selector + ' .js-plotly-plot');
  return plot && plot._fullData ? plot._fullData.filter((trace) => trace._length !== 0).length : 0;
}"""
TRIALS = 2


def test_a_sweep_started_in_the_tab_fills_the_trial_table_and_the_parallel_coordinate_plot(tmp_path):
    began = time.time()
    with studio_page(tmp_path, 1400, 1100) as (server, page):
        page.get_by_role("tab", name="Sweeps").click()
        page.locator("#sweep-summary", has_text="No sweep yet").wait_for(timeout=60_000)
        space = page.locator("#sweep-space")
        assert "learning_rate" in space.inner_text()  # prefilled from the key's declaration

        # One update of the shipped config (128 envs x 32 steps) a trial, two trials at once.
        for selector, value in (("#sweep-budget", "4096"), ("#sweep-trials", str(TRIALS)), ("#sweep-jobs", "2")):
            box = page.locator(f"{selector} input")
            box.fill(value)
            box.press("Tab")
        page.locator("#sweep-name").get_by_role("textbox").fill("tiny")
        page.locator("#sweep-file", has_text="total_timesteps: 4096").wait_for(timeout=30_000)
        page.locator("#sweep-start").click()
        page.locator("#sweep-message", has_text="Started the sweep").wait_for(timeout=60_000)
        print(f"sweep started after {time.time() - began:.0f} s")

        table = page.locator("#sweep-trials-table")
        page.wait_for_function(
            f"() => (document.querySelector('#sweep-trials-table').innerText.match(/finished/g) || []).length >= {TRIALS}",
            timeout=240_000,
        )
        print(f"{TRIALS} trials finished after {time.time() - began:.0f} s")
        assert "learning_rate=" in table.inner_text()
        page.wait_for_function(f"() => ({TRACES})('#sweep-parallel') > 0", timeout=60_000)
        page.wait_for_function(f"() => ({TRACES})('#sweep-curves') >= {TRIALS}", timeout=60_000)
        page.locator("#sweep-summary", has_text=f"{TRIALS} finished").wait_for(timeout=60_000)
        page.locator("#sweep-log", has_text="best.yaml").wait_for(timeout=60_000)

        page.locator("#sweep-open-best").click()
        page.locator("#train-message", has_text="best trial's config of the sweep").wait_for(timeout=30_000)
        assert page.locator("#start").is_visible()  # the Train tab is shown
        assert page.locator("#field-total-timesteps input").input_value() == "4096"
