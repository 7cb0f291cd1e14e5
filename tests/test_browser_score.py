"""The game score first, in the browser: a short Flappy Bird run from the form shows its score in
pipes in the status line and as the main chart, and the chart's switch shows the return instead."""

from __future__ import annotations

import re

import pytest

from test_studio_helpers import CHROMIUM, CHROMIUM_ARGS, start_studio

pytestmark = pytest.mark.browser

CHART_TITLE = """(text) => {
  const plot = document.querySelector('#reward-plot .js-plotly-plot');
  const title = plot && plot.querySelector('.gtitle');
  return plot && plot._fullData && plot._fullData.length > 0 && plot._fullData[0]._length >= 1
    && title && title.textContent.includes(text);
}"""


def test_flappy_bird_status_line_and_chart_show_the_score_in_pipes(tmp_path):
    from playwright.sync_api import sync_playwright

    server = start_studio(tmp_path / "runs", tmp_path / "studio.log")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1100})
                page.goto(server.url, wait_until="load")
                page.locator("#start").wait_for()
                env_box = page.locator("#field-env-name input")
                env_box.click()
                page.get_by_role("option", name="flappy_bird", exact=True).click()
                page.locator("#train-message").get_by_text("flappy_bird").wait_for(timeout=30_000)
                # Three updates of the tuned config (128 envs x 64 steps): episodes finish in the first.
                page.locator("#field-total-timesteps input").fill(str(3 * 128 * 64))
                page.locator("#start").click()

                status = page.locator("#status")
                status.locator(".run-score").get_by_text("pipes").wait_for(timeout=180_000)
                text = status.inner_text()
                assert re.search(r"\d+(\.\d)? pipes", text), text
                assert text.index("pipes") < text.index("return")  # the score first, the return after it
                page.wait_for_function(CHART_TITLE, arg="Game score (pipes)", timeout=60_000)

                page.locator("#chart-metric").get_by_text("return", exact=True).click()
                page.wait_for_function(CHART_TITLE, arg="Episode return", timeout=60_000)
            finally:
                browser.close()
    finally:
        server.stop()
