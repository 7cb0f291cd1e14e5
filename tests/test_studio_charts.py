"""The game score first, in each game's unit, and the main chart's options (no browser): score
labels per game, the score / return / length switch, smoothing, log scale, x by training time,
downsampling that keeps extremes, separate axes per game, gaps in the machine chart, empty charts."""

from __future__ import annotations

import numpy as np
import pytest
from plotly.graph_objects import Figure

from envs.registry import score_unit
from studio import views
from studio.charts import ChartOptions, CurveSource, diagnostics_figure, reward_figure
from studio.evaluate import EvaluationSummary
from studio.runs import RunState
from studio.score import format_count, game_name, game_score
from studio.series import MAX_POINTS_PER_CURVE, downsample
from studio.system_chart import UsageSample, system_figure


def events(
    count: int, score=lambda update: update / 10, ret=lambda update: 100.0 + update, steps_per_update: int = 8192
) -> list[dict]:
    """`count` metrics events with the given score and return per update (1-based)."""
    return [
        {
            "type": "metrics",
            "time": 1000.0 + update,
            "step": update * steps_per_update,
            "update": update,
            "elapsed": update * 0.5,
            "fps": 16384.0,
            "episodes": update * 3,
            "episode_return_mean": ret(update),
            "recent_return_mean": ret(update),
            "episode_score_mean": score(update),
            "recent_score_mean": score(update),
            "episode_length_mean": 40.0 + update,
            "policy_loss": -0.01,
            "value_loss": 1.0,
            "entropy": 0.5,
            "approx_kl": 0.01,
            "clip_fraction": 0.1,
            "explained_variance": 0.5,
            "learning_rate": 3e-4,
        }
        for update in range(1, count + 1)
    ]


def snapshot(tmp_path, env_name: str, metrics: list[dict], total: int = 20_000_000):
    state = RunState(run_id=f"{env_name}-run", run_dir=tmp_path, managed=True)
    state.apply(
        {
            "type": "start",
            "time": 1000.0,
            "run_id": state.run_id,
            "device": "cpu",
            "config": {"env_name": env_name, "model_type": "ppo-small", "total_timesteps": total},
            "total_timesteps": total,
            "resumed_from_step": None,
        }
    )
    for event in metrics:
        state.apply(event)
    return state.snapshot()


# ----------------------------------------------------------------------------- score labels per game


@pytest.mark.parametrize(
    "env_name, unit",
    [
        ("flappy_bird", "pipes"),
        ("FlappyBird-v0", "pipes"),
        ("gym:FlappyBird-v0", "pipes"),
        ("snake", "food"),
        ("Snake-v0", "food"),
        ("cartpole", "steps balanced"),
        ("CartPole-v1", "steps balanced"),
        ("Pendulum-v1", None),
        ("Acrobot-v1", None),
        ("not-a-game", None),
    ],
)
def test_each_game_declares_its_score_unit_once_on_its_class(env_name, unit):
    assert score_unit(env_name) == unit
    score = game_score(env_name)
    assert score.unit == unit and score.is_return == (unit is None)
    assert score.key == ("episode_return_mean" if unit is None else "episode_score_mean")


def test_score_text_names_the_unit_or_says_return():
    assert game_score("flappy_bird").text(52.25) == "52.2 pipes"
    assert game_score("Pendulum-v1").text(-985.0) == "return -985.0"
    assert game_score("snake").text(None) == "–"
    assert game_name("CartPole-v1") == game_name("gym:cartpole") == "cartpole"
    assert game_name("Pendulum-v1") == "Pendulum-v1"


def test_counts_read_at_a_glance():
    assert format_count(20_000_000) == "20M" and format_count(2_007_040) == "2.01M"
    assert format_count(51_200) == "51.2k" and format_count(512) == "512"


def test_status_line_puts_the_flappy_bird_score_in_pipes_first(tmp_path):
    run = snapshot(tmp_path, "flappy_bird", events(245, score=lambda u: 52.3, ret=lambda u: 1020.0))
    html = views.status_html(run)
    assert "52.3 pipes" in html
    assert html.index("52.3 pipes") < html.index("return 1,020")  # the score first, the shaped return after
    assert "20M" in html and "2.01M" in html  # step 2,007,040 / 20,000,000, readable
    assert "20000000" not in html.replace('title="20,000,000"', "")


def test_status_line_of_a_gymnasium_env_shows_the_return_once(tmp_path):
    run = snapshot(tmp_path, "Pendulum-v1", events(10, score=lambda u: -985.0, ret=lambda u: -985.0))
    html = views.status_html(run)
    assert "return <b>-985.0</b>" in html
    assert html.count("-985") == 1 and "score" not in html.replace("run-score", "")


def test_runs_table_has_a_score_column_in_each_games_unit(tmp_path):
    rows = views.runs_table_rows(
        [
            snapshot(tmp_path / "a", "snake", events(3, score=lambda u: 12.0)),
            snapshot(tmp_path / "b", "Acrobot-v1", events(3, ret=lambda u: -80.0)),
            snapshot(tmp_path / "c", "cartpole", []),
        ]
    )
    scores = [dict(zip(views.RUNS_TABLE_HEADERS, row))["score"] for row in rows]
    assert scores == ["12.0 food", "return -80.0", "–"]
    shown = views.runs_table(rows)
    assert shown.data["steps"].tolist() == [3 * 8192, 3 * 8192, 0]  # still numbers: the column sorts
    text = shown.to_html()
    assert "24.6k" in text and "24576" not in text


def test_evaluate_headline_is_the_game_score_in_its_unit():
    flappy = EvaluationSummary("flappy_bird", 2_007_040, 10, True, 1020.5, 40.2, 52.3, 4.1, 0, None).markdown()
    assert flappy.startswith("### 52.3 ± 4.1 pipes") and "Return 1,020 ± 40.2" in flappy
    pendulum = EvaluationSummary("Pendulum-v1", 1000, 10, True, -985.0, 30.0, -985.0, 30.0, 0, None).markdown()
    assert pendulum.startswith("### Return -985.0 ± 30.0") and "core" not in pendulum


# ----------------------------------------------------------------------------- the main chart


def test_main_chart_switches_between_score_return_and_length():
    source = [CurveSource("run", events(20, score=lambda u: 3.0, ret=lambda u: 700.0), "flappy_bird")]
    score = Figure(reward_figure(source))  # the score is the default
    assert score.layout.title.text == "Game score (pipes)" and score.layout.yaxis.title.text == "pipes per episode"
    assert set(score.data[0].y) == {3.0}
    returns = Figure(reward_figure(source, metric="return"))
    assert returns.layout.title.text == "Episode return" and set(returns.data[0].y) == {700.0}
    length = Figure(reward_figure(source, metric="length"))
    assert length.layout.title.text == "Episode length" and list(length.data[0].y[:2]) == [41.0, 42.0]
    with pytest.raises(ValueError, match="metric must be one of score, return, length"):
        reward_figure(source, metric="pipes")


def test_a_gymnasium_envs_score_chart_is_its_return_labelled_so():
    figure = Figure(
        reward_figure([CurveSource("run", events(5, score=lambda u: 1.0, ret=lambda u: -500.0), "Pendulum-v1")])
    )
    assert figure.layout.title.text == "Episode return" and figure.layout.yaxis.title.text == "mean return"
    assert set(figure.data[0].y) == {-500.0}


def test_smoothing_slider_sets_the_ema_weight_and_zero_shows_the_raw_curve_alone():
    noisy = events(200, score=lambda u: float(u % 2 * 10))  # 0, 10, 0, 10...
    source = [CurveSource("run", noisy, "flappy_bird")]
    light, heavy = (Figure(reward_figure(source, smoothing=weight)).data[1].y for weight in (0.3, 0.95))
    raw = [event["episode_score_mean"] for event in noisy]
    assert np.std(heavy[50:]) < np.std(light[50:]) < np.std(raw[50:])
    assert np.mean(heavy[50:]) == pytest.approx(5.0, abs=0.5)  # smoothed, not shifted
    raw_only = Figure(reward_figure(source, smoothing=0))
    assert len(raw_only.data) == 1 and list(raw_only.data[0].y[:4]) == [10.0, 0.0, 10.0, 0.0]


def test_log_scale_where_the_values_allow_it():
    positive = Figure(reward_figure([CurveSource("run", events(10), "cartpole")], log=True, metric="return"))
    assert positive.layout.yaxis.type == "log"
    negative = Figure(reward_figure([CurveSource("run", events(10, ret=lambda u: -u), "Pendulum-v1")], log=True))
    assert negative.layout.yaxis.type != "log"
    assert "log scale needs values above 0" in negative.layout.title.text
    mixed = Figure(
        reward_figure(
            [
                CurveSource("a", events(10), "cartpole"),
                CurveSource("b", events(10, score=lambda u: u - 5.0), "flappy_bird"),
            ],
            log=True,
        )
    )
    assert mixed.layout.yaxis.type == "log" and mixed.layout.yaxis2.type != "log"  # each game's panel on its own
    assert "log scale needs values above 0" in mixed.layout.annotations[1].text


def test_x_axis_by_training_time():
    figure = Figure(reward_figure([CurveSource("run", events(600), "cartpole")], x="time"))
    assert figure.layout.xaxis.title.text == "training time (min)"  # 600 updates x 0.5 s = 5 min
    assert figure.data[0].x[-1] == pytest.approx(5.0)
    assert Figure(diagnostics_figure([CurveSource("run", events(600), "cartpole")], x="time")).data[0].x[
        -1
    ] == pytest.approx(5.0)


def test_the_charts_show_the_metric_registrys_metrics_under_its_labels():
    """The small charts and the main chart's titles come from trainer/config/metrics.py: each small
    chart plots its registry field under its registry label, in the registry's order (the charts of
    the metrics the run has: a PPO run's events carry no Q-values)."""
    from trainer.config.metrics import chart_metrics

    metrics = events(5)
    figure = Figure(diagnostics_figure([CurveSource("run", metrics, "cartpole")]))
    placed = [(name, chart) for name, chart in chart_metrics("diagnostics") if name in metrics[0]]
    assert len(placed) == 8
    assert [annotation.text for annotation in figure.layout.annotations] == [chart.label for _, chart in placed]
    assert [list(trace.y) for trace in figure.data] == [[event[name] for event in metrics] for name, _ in placed]
    for name, chart in chart_metrics("main"):
        if chart.option != "score":  # the score's title names the game's unit (studio/score.py)
            assert (
                Figure(reward_figure([CurveSource("run", metrics, "cartpole")], metric=chart.option)).layout.title.text
                == chart.label
            )


def test_chart_options_from_the_controls_fall_back_to_defaults():
    assert ChartOptions.from_controls("length", 0.5, True, "time") == ChartOptions("length", 0.5, True, "time")
    assert ChartOptions.from_controls(None, "x", None, "days") == ChartOptions()
    assert ChartOptions.from_controls("score", 7).smoothing == 0.99


def test_a_20m_step_run_draws_a_bounded_number_of_points_keeping_spikes():
    updates = 20_000_000 // 8192  # the default Flappy Bird run: 2,441 updates
    spike, dip = 1234, 1800
    source = [
        CurveSource(
            "run", events(updates, score=lambda u: 500.0 if u == spike else (-5.0 if u == dip else 50.0)), "flappy_bird"
        )
    ]
    figure = Figure(reward_figure(source, smoothing=0))
    (trace,) = figure.data
    assert len(trace.x) <= MAX_POINTS_PER_CURVE
    assert max(trace.y) == 500.0 and min(trace.y) == -5.0  # every-n-th thinning would lose them
    assert trace.x[0] == 8192 and trace.x[-1] == updates * 8192
    assert list(trace.x) == sorted(trace.x)


def test_downsample_keeps_extremes_of_every_stretch_and_small_series_whole():
    steps = np.arange(100_000, dtype=float)
    values = np.sin(steps / 500.0)
    values[77_777] = 9.0
    kept_steps, kept_values = downsample(steps, values, max_points=300)
    assert len(kept_steps) <= 300 and kept_values.max() == 9.0
    assert kept_values.min() == pytest.approx(-1.0, abs=1e-4)
    small = np.arange(10.0)
    assert downsample(small, small, max_points=300)[0] is small


def test_runs_of_different_games_get_separate_axes_in_their_units():
    figure = Figure(
        reward_figure(
            [
                CurveSource("flappy", events(50, score=lambda u: 40.0), "flappy_bird"),
                CurveSource("cartpole-a", events(20, score=lambda u: 500.0), "cartpole"),
                CurveSource("cartpole-b", events(20, score=lambda u: 300.0), "CartPole-v1"),  # the same game
            ]
        )
    )
    axes = {trace.name: (trace.xaxis or "x", trace.yaxis or "y") for trace in figure.data if "raw" not in trace.name}
    assert axes == {"flappy": ("x", "y"), "cartpole-a": ("x2", "y2"), "cartpole-b": ("x2", "y2")}
    assert figure.layout.yaxis.title.text == "pipes per episode"
    assert figure.layout.yaxis2.title.text == "steps balanced per episode"
    top, bottom = figure.layout.yaxis.domain, figure.layout.yaxis2.domain
    assert bottom[1] < top[0]  # stacked, not overlaid
    titles = " ".join(annotation.text for annotation in figure.layout.annotations)
    assert "flappy_bird" in titles and "cartpole" in titles
    same_game = Figure(reward_figure([CurveSource("a", events(5), "snake"), CurveSource("b", events(5), "Snake-v0")]))
    assert {trace.yaxis or "y" for trace in same_game.data} == {"y"}


# ----------------------------------------------------------------------------- empty charts, the machine chart


@pytest.mark.parametrize(
    "figure",
    [
        reward_figure([]),
        reward_figure([CurveSource("run", [], "flappy_bird")]),
        diagnostics_figure([]),
        system_figure([]),
    ],
)
def test_empty_charts_show_a_placeholder_and_no_axes(figure):
    layout = Figure(figure).layout
    assert layout.xaxis.visible is False and layout.yaxis.visible is False
    assert len(layout.annotations) == 1 and (
        "Waiting" in layout.annotations[0].text or "Sampling" in layout.annotations[0].text
    )


def test_machine_chart_breaks_its_lines_across_sampling_gaps():
    times = [0, 2, 4, 6, 8, 300, 302, 304]  # nobody looked for ~5 minutes
    figure = Figure(system_figure([UsageSample(float(t), 10.0, 20.0) for t in times]))
    cpu = figure.data[0]
    assert list(cpu.y).count(None) == 1 and cpu.y.index(None) == 5 and cpu.connectgaps is False
    steady = Figure(system_figure([UsageSample(float(t), 10.0, 20.0) for t in range(0, 20, 2)]))
    assert None not in steady.data[0].y


def test_the_api_summary_carries_the_score_and_its_unit(tmp_path):
    summary = views.run_summary(snapshot(tmp_path, "snake", events(4, score=lambda u: 6.0)))
    assert summary["last_score"] == 6.0 and summary["score_unit"] == "food"
    gym = views.run_summary(snapshot(tmp_path / "gym", "Acrobot-v1", events(4, ret=lambda u: -90.0)))
    assert gym["last_score"] == -90.0 and gym["score_unit"] is None


def test_a_chart_control_change_redraws_at_once_while_the_run_trains(tmp_path):
    import json

    from studio.run_view import charts_due_now
    from test_studio_runs import fake_endless_trainer, wait_for
    from test_studio_ui import SKIP, form, make_studio

    studio = make_studio(tmp_path, target=fake_endless_trainer, chart_seconds=600)
    try:
        _, run_id, _, viewed = studio.on_start(*form())
        wait_for(lambda: len(studio.manager.get(run_id).metrics) >= 2)
        first = studio.on_tick(run_id, viewed)  # the default chart: the game score
        assert json.loads(first[1].plot)["layout"]["title"]["text"] == "Game score (steps balanced)"
        assert studio.on_tick(run_id, first[-1], "length", 0.8, False, "steps")[1] == SKIP  # held to the pace
        changed = studio.on_tick(run_id, charts_due_now(first[-1]), "length", 0.8, False, "steps")
        assert json.loads(changed[1].plot)["layout"]["title"]["text"] == "Episode length"
    finally:
        studio.manager.shutdown(timeout=10)


def test_a_chart_of_one_point_draws_it_on_an_axis_from_zero():
    one = events(1, steps_per_update=4096)
    for figure in (reward_figure([CurveSource("run", one, "cartpole")]), diagnostics_figure([CurveSource("run", one)])):
        drawn = [trace for trace in figure["data"] if trace["x"]]
        assert drawn and all("markers" in trace["mode"] for trace in drawn)  # a lone point of a line is invisible
        assert figure["layout"]["xaxis"]["rangemode"] == "tozero"  # not 4.095k..4.097k
    figure = reward_figure([CurveSource("run", events(2), "cartpole")])
    assert figure["data"][0]["mode"] == "lines" and "rangemode" not in figure["layout"]["xaxis"]
