"""Each algorithm's own charts and keys in the studio (no browser): the diagnostics grid draws the
small charts of the metrics a run has (a DQN run its Q-values, TD error, epsilon and replay buffer,
no PPO's KL; a PPO run no Q-values; an IMPALA run its policy lag; several algorithms compared, the
union), and the Train form shows the chosen algorithm's keys, title and all, and starts a run with them."""

from __future__ import annotations

from plotly.graph_objects import Figure

from studio.charts import DIAGNOSTIC_COLUMNS, DIAGNOSTICS, CurveSource, _diagnostics_grid, diagnostics_figure
from studio.form import FORM_FIELDS, advanced_groups, form_values, tuned_config, validated_config, visible_groups

PPO_ONLY = ("Approx. KL", "Clip fraction", "Explained variance", "Entropy", "Policy loss")
DQN_ONLY = ("Q-values", "TD error", "Epsilon", "Replay buffer")


def events(count: int, algo: str) -> list[dict]:
    """`count` metrics events as the loop writes them for `algo`: the metrics its update does not
    compute are null (trainer/run/outputs.py metric_blanks)."""
    made = []
    for update in range(1, count + 1):
        event = {
            "type": "metrics",
            "time": 1000.0 + update,
            "step": update * 256,
            "update": update,
            "elapsed": update * 0.5,
            "fps": 4000.0,
            "episodes": update * 3,
            "episode_return_mean": 20.0 + update,
            "episode_length_mean": 20.0 + update,
            "episode_score_mean": 20.0 + update,
            "recent_return_mean": 20.0 + update,
            "learning_rate": 1e-3,
            "policy_loss": None,
            "value_loss": 0.5,
            "entropy": None,
            "approx_kl": None,
            "clip_fraction": None,
            "explained_variance": None,
        }
        if algo == "ppo":
            event.update(policy_loss=-0.01, entropy=0.6, approx_kl=0.01, clip_fraction=0.1, explained_variance=0.4)
        elif algo == "dqn":
            event.update(
                q_value_mean=1.0 + update,
                td_error_mean=0.3,
                epsilon=max(0.05, 1 - update / 10),
                buffer_size=update * 256,
            )
        elif algo == "sac":
            event.update(policy_loss=-1.0, entropy=0.9, alpha=0.2, q_value_mean=3.0, td_error_mean=0.2, buffer_size=512)
        elif algo == "impala":  # fed by actors: its lag and their numbers
            event.update(
                policy_loss=-0.02,
                entropy=0.5,
                explained_variance=0.3,
                policy_lag=min(update - 1, 3),
                queue_depth=1,
                dropped_batches=0,
                actors=2,
            )
        made.append(event)
    return made


def titles(figure: dict) -> list[str]:
    return [annotation.text for annotation in Figure(figure).layout.annotations]


def test_a_dqn_run_shows_its_own_diagnostics_and_none_of_ppos():
    figure = diagnostics_figure([CurveSource("dqn-run", events(6, "dqn"), "cartpole")])
    shown = titles(figure)
    assert set(DQN_ONLY) <= set(shown) and not set(PPO_ONLY) & set(shown)
    assert shown == ["Episode length", "Value loss", "Steps / s", *DQN_ONLY]  # the registry's order
    (q_values,) = [trace for trace in figure["data"] if trace["yaxis"] == f"y{shown.index('Q-values') + 1}"]
    assert q_values["y"] == [1.0 + update for update in range(1, 7)]
    # 7 charts: 2 rows of 4, the empty last cell without axes
    layout = Figure(figure).layout
    assert layout.xaxis8.visible is False and layout.yaxis8.visible is False and layout.xaxis7.visible is not False


def test_a_ppo_run_shows_no_q_values():
    shown = titles(diagnostics_figure([CurveSource("ppo-run", events(6, "ppo"), "cartpole")]))
    assert "Q-values" not in shown and not set(DQN_ONLY) & set(shown)
    assert set(PPO_ONLY) <= set(shown) and len(shown) == 8


def test_an_impala_run_shows_its_policy_lag_and_none_of_the_replay_charts():
    figure = diagnostics_figure([CurveSource("impala-run", events(6, "impala"), "cartpole")])
    shown = titles(figure)
    assert "Policy lag" in shown and not set(DQN_ONLY) & set(shown)
    assert "Approx. KL" not in shown and "Clip fraction" not in shown  # PPO's ratio: not in IMPALA's update
    (lag,) = [trace for trace in figure["data"] if trace["yaxis"] == f"y{shown.index('Policy lag') + 1}"]
    assert lag["y"] == [0, 1, 2, 3, 3, 3]


def test_comparing_runs_of_several_algorithms_shows_the_union_in_registry_order():
    sources = [
        CurveSource("ppo-run", events(4, "ppo"), "cartpole"),
        CurveSource("dqn-run", events(5, "dqn"), "cartpole"),
        CurveSource("sac-run", events(3, "sac"), "pendulum"),
        CurveSource("impala-run", events(4, "impala"), "cartpole"),
    ]
    figure = diagnostics_figure(sources)
    assert titles(figure) == [title for _, title in DIAGNOSTICS]  # each chart some run has
    assert len(figure["data"]) == len(sources) * len(DIAGNOSTICS)  # a trace per run and chart, empty where none
    assert figure["layout"]["height"] > diagnostics_figure(sources[:1])["layout"]["height"]  # 4 rows, not 2
    names = {source.label for source in sources}
    assert {trace["name"] for trace in figure["data"] if trace["showlegend"]} == names  # each run once
    assert len([trace for trace in figure["data"] if trace["showlegend"]]) == len(sources)


def test_no_values_yet_shows_the_waiting_text():
    no_update_yet = [
        {**event, "value_loss": None, "fps": None, "episode_length_mean": None} for event in events(2, "x")
    ]
    for sources in ([], [CurveSource("run", [], "cartpole")], [CurveSource("run", no_update_yet, "cartpole")]):
        layout = Figure(diagnostics_figure(sources)).layout
        assert len(layout.annotations) == 1 and "Waiting" in layout.annotations[0].text


def test_the_grid_is_computed_once_per_set_of_charts():
    dqn = [CurveSource("dqn-run", events(3, "dqn"), "cartpole")]
    diagnostics_figure(dqn)
    before = _diagnostics_grid.cache_info()
    for count in (4, 5, 6):
        diagnostics_figure([CurveSource("dqn-run", events(count, "dqn"), "cartpole")])
    after = _diagnostics_grid.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 3
    grid = _diagnostics_grid(tuple(DQN_ONLY))
    assert len([name for name in grid if name.startswith("xaxis")]) == DIAGNOSTIC_COLUMNS


# ----------------------------------------------------------------------------- the Train form


def test_choosing_dqn_or_sac_shows_its_keys_and_groups_and_hides_ppos():
    keys = [form_field.key for form_field in FORM_FIELDS]
    from studio.form import visible_fields

    for algo, own, other in (("dqn", "target_update_interval", "policy_frequency"), ("sac", "autotune", "dueling")):
        shown = dict(zip(keys, visible_fields(algo)))
        assert shown[own] and shown["buffer_size"] and shown["tau"] and shown["learning_starts"]
        assert not shown[other] and not shown["clip_coef"] and not shown["update_epochs"]
        assert shown["gamma"] and shown["learning_rate"] and shown["use_per"]
        groups = dict(zip((title for title, _ in advanced_groups()), visible_groups(algo)))
        assert groups["Replay buffer and targets"] and groups[algo.upper()]
        assert not groups["SAC" if algo == "dqn" else "DQN"]
    groups = dict(zip((title for title, _ in advanced_groups()), visible_groups("ppo")))
    assert groups["PPO"] and not groups["DQN"] and not groups["SAC"] and not groups["Replay buffer and targets"]


def test_a_dqn_run_starts_from_the_form_with_optional_keys_left_empty():
    keys = [form_field.key for form_field in FORM_FIELDS]
    values = dict(zip(keys, form_values(tuned_config("cartpole"))))
    values.update(algo="dqn", num_envs=8, learning_starts=200, total_timesteps=20_000, tau=None)
    config = validated_config([values[key] for key in keys], allow_custom_envs=False)
    assert (config.algo, config.learning_starts, config.tau) == ("dqn", 200, 1.0)  # null: dqn's hard copy
    assert "clip_coef" not in config.to_dict() and "target_update_interval" in config.to_dict()
    values.update(algo="sac", tau=0, target_entropy=None)  # a number box's 0: not set
    config = validated_config([values[key] for key in keys], allow_custom_envs=False)
    assert (config.algo, config.tau, config.target_entropy) == ("sac", 0.005, None)
