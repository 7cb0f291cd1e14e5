"""DQN from the studio's form, in headless Chromium: choosing `dqn` in the algorithm menu shows
DQN's own keys (the replay buffer's, DQN's) and hides PPO's, a short CartPole run starts from the
form with them (tau left empty: DQN's own default), and the diagnostics grid draws DQN's charts
(Q-values with points, no PPO approx. KL)."""

from __future__ import annotations

import pytest

from test_studio_helpers import pick_game, studio_page

pytestmark = pytest.mark.browser

# The points of the diagnostics chart titled `title` (0 while it is not drawn).
CHART_POINTS = """(title) => {
  const plot = document.querySelector('#diagnostics-plot .js-plotly-plot');
  if (!plot || !plot._fullData || !plot.layout || !plot.layout.annotations) return 0;
  const index = plot.layout.annotations.findIndex((annotation) => annotation.text === title);
  if (index < 0) return 0;
  const axis = index === 0 ? 'y' : 'y' + (index + 1);
  return Math.max(0, ...plot._fullData.filter((trace) => (trace.yaxis || 'y') === axis).map((trace) => trace._length));
}"""
CHART_TITLES = """() => {
  const plot = document.querySelector('#diagnostics-plot .js-plotly-plot');
  return plot && plot.layout && plot.layout.annotations ? plot.layout.annotations.map((annotation) => annotation.text) : [];
}"""


def test_a_dqn_run_from_the_form_draws_its_q_values(tmp_path):
    with studio_page(tmp_path, 1500, 1100) as (server, page):
        pick_game(page, "cartpole")
        page.locator("#advanced").get_by_text("Advanced").first.click()
        algo_box = page.locator("#field-algo input")
        algo_box.wait_for()
        assert page.locator("#field-clip-coef").is_visible() and not page.locator("#group-dqn").is_visible()

        algo_box.click()
        page.get_by_role("option", name="dqn", exact=True).click()
        page.locator("#field-target-update-interval").wait_for(state="visible", timeout=30_000)
        for shown in ("#group-replay-buffer-and-targets", "#field-buffer-size", "#field-learning-starts", "#field-tau"):
            assert page.locator(shown).is_visible(), shown
        page.locator("#field-clip-coef").wait_for(state="hidden", timeout=30_000)
        for hidden in ("#field-update-epochs", "#field-ent-coef", "#group-sac", "#field-autotune"):
            assert not page.locator(hidden).is_visible(), hidden

        page.locator("#field-num-envs input").fill("8")
        page.locator("#field-total-timesteps input").fill("20000")
        page.locator("#field-learning-starts input").fill("200")
        page.locator("#field-tau input").fill("")  # an empty optional box: null, DQN's hard target copy
        page.locator("#start").click()

        try:
            page.wait_for_function(f"() => ({CHART_POINTS})('Q-values') >= 2", timeout=240_000)
        except Exception:  # noqa: BLE001 - say what the page and the studio showed instead
            raise AssertionError(
                f"no Q-values points; message: {page.locator('#train-message').inner_text()!r}; "
                f"status: {page.locator('#status').inner_text()!r}; charts: {page.evaluate(CHART_TITLES)}\n"
                f"{server.log()[-3000:]}"
            ) from None
        titles = page.evaluate(CHART_TITLES)
        assert {"Q-values", "TD error", "Epsilon", "Replay buffer"} <= set(titles), titles
        assert "Approx. KL" not in titles and "Clip fraction" not in titles, titles
        page.screenshot(path=str(tmp_path / "studio-dqn.png"), full_page=True)

        (config_file,) = (tmp_path / "runs").glob("*/config.yaml")
        config = config_file.read_text()
        assert "algo: dqn" in config and "learning_starts: 200" in config and "tau: 1.0" in config, config
        assert "clip_coef" not in config
