"""Issue 27's rough edges, in headless Chromium, where a user saw them.

One studio serves three runs made before it starts (all CartPole, picked explicitly, whatever the
studio's default game): an old finished run with one update only, a finished run, and the
newest, stopped run with a non-default batch (256 envs x 32 steps, minibatches of 512) that is
larger than its total_timesteps. The Train tab shows the newest run, so the form holds its
settings.
"""

from __future__ import annotations

import threading
import time

import pytest

from test_studio_helpers import CHROMIUM, CHROMIUM_ARGS, start_studio
from test_studio_runs import CONFIG, fake_trainer
from trainer.run.layout import create_run_dir, write_config

pytestmark = pytest.mark.browser

BATCH = {"num_envs": 256, "num_steps": 32, "mini_batch_size": 512}  # the default minibatch is smaller
NOTE = "#batch-note"
# Each Runs table header: its words, the lines its text takes, its right edge; and the table's
# scroll box (its visible right edge, and whether it scrolls sideways).
HEADERS = """() => {
  const table = [...document.querySelectorAll('#runs-table table')].find(
    t => t.querySelector('thead th') && t.checkVisibility({visibilityProperty: true}));
  let box = table.parentElement;
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
  const heads = [...table.querySelectorAll('thead th')].map(th => {
    const text = th.innerText.trim();
    if (!text) return null;
    const tops = new Set();  // one per line of the header's text
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const r of range.getClientRects()) if (r.width > 0) tops.add(Math.round(r.top));
    }
    const rect = th.getBoundingClientRect();
    return {text, words: text.split(/\\s+/).length, lines: tops.size, left: rect.left, right: rect.right};
  }).filter(Boolean);
  const shown = box.getBoundingClientRect();
  return {heads, box_left: shown.left, box_right: shown.right, scrolls: box.scrollWidth > box.clientWidth + 1};
}"""


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("rough-edges")
    made = {}
    for label, settings, updates, stopped in (
        ("one-point", {"seed": 1}, 1, False),
        ("finished", {"seed": 2}, 10, False),
        ("stopped", {"seed": 3, **BATCH}, 10, True),
    ):
        config = {**CONFIG, **settings}  # CONFIG: cartpole, total_timesteps 1000
        run_dir = create_run_dir(config, root / "runs")
        write_config(run_dir, config)
        stop = threading.Event()
        if stopped:
            stop.set()  # stopped at once: a final model, status "stopped"
        fake_trainer(config, str(run_dir), None, stop, False, updates=updates)
        made[label] = run_dir.name
        time.sleep(1.1)  # distinct start times: the newest is the stopped run
    server = start_studio(root / "runs", root / "studio.log")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield server, browser, made
            finally:
                browser.close()
    finally:
        server.stop()


def open_page(browser, server, width: int, height: int = 1000):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(90_000)  # a loaded machine: the first events take their time
    page.goto(server.url, wait_until="load")
    page.locator("#start").wait_for()
    return page


def row_cell(page, run_id: str):
    """The Runs table's cell that shows `run_id`."""
    return page.locator("#runs-table").get_by_text(run_id, exact=True).filter(visible=True).first


def note_text(page) -> str:
    return page.locator(NOTE).inner_text()


def test_the_batch_note_matches_the_form_after_a_reload(studio):
    server, browser, made = studio
    page = open_page(browser, server, 1400)
    for _ in range(2):  # the first load, then a reload
        page.wait_for_function("() => document.querySelector('#field-num-envs input')?.value === '256'")
        page.locator(NOTE, has_text="256 × 32 = 8,192").wait_for()  # the run's numbers, not the page's defaults
        time.sleep(2)  # no late, stale redraw replaces it
        note = note_text(page)
        assert "256 × 32 = 8,192" in note and "16 minibatches of 512" in note, note
        # One update (8,192 steps) is more than total_timesteps (1,000): the form says so before Start.
        assert "more than total_timesteps" in note and "single update" in note, note
        page.reload(wait_until="load")
        page.locator("#start").wait_for()
    page.close()


def test_evaluate_preselects_the_run_last_viewed(studio):
    server, browser, made = studio
    page = open_page(browser, server, 1400)
    page.wait_for_function("() => document.querySelector('#field-num-envs input')?.value === '256'")
    # The Train tab shows the stopped run: Evaluate opens on it, not on an older finished run.
    page.get_by_role("tab", name="Evaluate").click()
    picked = page.locator("#eval-run input")
    page.wait_for_function(f"() => document.querySelector('#eval-run input')?.value === '{made['stopped']}'")
    # A run opened on the Runs tab is the one viewed last.
    page.get_by_role("tab", name="Runs").click()
    row_cell(page, made["finished"]).click()
    page.wait_for_function(f"() => document.querySelector('#run-picker input')?.value === '{made['finished']}'")
    page.get_by_role("tab", name="Evaluate").click()
    page.wait_for_function(f"() => document.querySelector('#eval-run input')?.value === '{made['finished']}'")
    assert picked.input_value() == made["finished"]
    page.close()


@pytest.mark.parametrize("width", [1400, 390])
def test_the_runs_table_is_readable_on_a_wide_screen_and_a_phone(studio, width):
    server, browser, made = studio
    page = open_page(browser, server, width)
    page.get_by_role("tab", name="Runs").click()
    row_cell(page, made["stopped"]).wait_for()
    table = page.evaluate(HEADERS)
    heads = {head["text"]: head for head in table["heads"]}
    assert list(heads)[:3] == ["run", "status", "score"], list(heads)  # the key columns first
    for head in table["heads"]:  # no header broken inside a word ("na / me")
        assert head["lines"] <= head["words"], head
    if width == 1400:  # every column in view, none clipped ("disk (MiB)")
        assert not table["scrolls"], table
        assert all(head["right"] <= table["box_right"] + 1 for head in table["heads"]), table
    else:  # a phone: run and status in view, the rest a sideways scroll away
        assert table["scrolls"], table
        for name in ("run", "status"):
            assert heads[name]["right"] <= min(width, table["box_right"]) + 1, table
        cell = row_cell(page, made["stopped"])
        assert cell.evaluate("cell => cell.scrollWidth <= cell.clientWidth + 1"), "the run id is cut"
    page.screenshot(path=str(server.runs_dir.parent / f"runs-table-{width}.png"))
    page.close()


def test_a_yaml_error_shows_as_written_and_a_one_point_chart_shows_its_point(studio):
    server, browser, made = studio
    page = open_page(browser, server, 1400)
    page.locator("#yaml-section").get_by_text("YAML config").first.click()
    page.locator("#yaml-box .cm-content").fill("env_name: cartpole\nnum_envs: *s\n")
    page.locator("#load-yaml").click()
    message = page.locator("#train-message", has_text="YAML alias")
    message.wait_for()
    assert "(*name)" in message.inner_text()  # the asterisk as written, not an italic run
    assert page.locator("#train-message em").count() == 0

    # A run with a single update: its point is drawn, on an axis from 0 past it.
    page.get_by_role("tab", name="Runs").click()
    row_cell(page, made["one-point"]).click()
    page.wait_for_function(
        "() => { const gd = document.querySelector('#runs-reward-plot .js-plotly-plot');"
        " return gd && gd._fullData && gd._fullData.length && gd._fullData[0]._length === 1; }"
    )
    shown = page.evaluate(
        "() => { const gd = document.querySelector('#runs-reward-plot .js-plotly-plot');"
        " return {mode: gd._fullData[0].mode, range: gd._fullLayout.xaxis.range}; }"
    )
    assert "markers" in shown["mode"], shown
    low, high = shown["range"]
    assert low <= 0 < 100 < high, shown  # the point (step 100) inside, not at the edge of x ± 1
    page.close()
