"""Charts, status line, tables, CSV, usage sampling and the form <-> config mapping (no browser)."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from plotly.graph_objects import Figure

from studio import views
from studio.charts import CurveSource, diagnostics_figure, reward_figure
from studio.form import (
    FORM_FIELDS,
    NOT_IN_FORM,
    FormError,
    check_web_safety,
    config_from_yaml_text,
    form_values,
    raw_config_from_form,
    tuned_config,
    validated_config,
)
from studio.runs import GifInfo, RunState
from studio.series import downsample, smooth
from studio.system import SystemMonitor, parse_nvidia_smi
from studio.system_chart import UsageSample, system_figure
from trainer.config.checks import ConfigError
from trainer.config.keys import CheckpointConfig
from trainer.config.validation import config_from_dict
from trainer.run.retention import run_size_bytes


def metrics_events(count: int, start_step: int = 0) -> list[dict]:
    events = []
    for update in range(1, count + 1):
        events.append(
            {
                "type": "metrics",
                "time": 1000.0 + update,
                "step": start_step + update * 512,
                "update": update,
                "fps": 10000.0,
                "elapsed": update * 0.05,
                "episodes": update * 3,
                "episode_return_mean": None if update == 1 else float(update),
                "episode_length_mean": float(update),
                "episode_score_mean": float(update),
                "recent_return_mean": float(update),
                "policy_loss": -0.02,
                "value_loss": 1.0,
                "entropy": 0.6,
                "approx_kl": 0.01,
                "clip_fraction": 0.1,
                "explained_variance": 0.3,
                "learning_rate": 2.5e-4,
            }
        )
    return events


def snapshot_with(tmp_path: Path, events: list[dict], status_events=()) -> views.RunSnapshot:
    state = RunState(run_id="cartpole-ppo-small-1", run_dir=tmp_path, managed=True)
    state.apply(
        {
            "type": "start",
            "time": 1000.0,
            "run_id": "cartpole-ppo-small-1",
            "device": "cpu",
            "config": {"env_name": "cartpole", "model_type": "ppo-small", "total_timesteps": 51200},
            "total_timesteps": 51200,
            "resumed_from_step": None,
        }
    )
    for event in [*events, *status_events]:
        state.apply(event)
    return state.snapshot()


# ----------------------------------------------------------------------------- charts


def test_smoothing_follows_the_data_without_startup_bias():
    values = [10.0] * 5 + [20.0] * 50
    smoothed = smooth(values)
    assert smoothed[0] == pytest.approx(10.0)  # bias-corrected: no drag towards 0
    assert smoothed[-1] == pytest.approx(20.0, abs=1e-3)
    assert 10.0 < smoothed[6] < 20.0


def test_downsample_keeps_the_last_point():
    steps = np.arange(10_000, dtype=float)
    small_steps, small_values = downsample(steps, steps * 2, max_points=100)
    assert len(small_steps) <= 100
    assert small_steps[-1] == 9999 and small_values[-1] == 19998


def test_reward_figure_has_raw_and_smoothed_curves_skipping_missing_returns():
    figure = Figure(reward_figure([CurveSource("run", metrics_events(20))]))
    raw, smoothed = figure.data
    assert len(raw.x) == 19  # the first update had no finished episode
    assert list(raw.y[:3]) == [2.0, 3.0, 4.0]
    assert smoothed.line.width > raw.line.width
    assert not figure.layout.annotations  # no "waiting" note once there is data


def test_overlay_draws_one_pair_of_curves_per_run_with_run_names():
    figure = Figure(reward_figure([CurveSource("run-a", metrics_events(5)), CurveSource("run-b", metrics_events(8))]))
    assert len(figure.data) == 4
    assert {trace.name for trace in figure.data if trace.showlegend is not False} >= {"run-a", "run-b"}
    diagnostics = Figure(
        diagnostics_figure([CurveSource("run-a", metrics_events(5)), CurveSource("run-b", metrics_events(8))])
    )
    titles = [annotation.text for annotation in diagnostics.layout.annotations]
    assert {
        "Episode length",
        "Explained variance",
        "Policy loss",
        "Value loss",
        "Entropy",
        "Approx. KL",
        "Steps / s",
    } <= set(titles)
    assert len(diagnostics.data) == 2 * 8


def test_empty_figures_say_what_they_wait_for():
    assert "Waiting" in Figure(reward_figure([CurveSource("run", [])])).layout.annotations[0].text
    assert "Waiting" in Figure(diagnostics_figure([])).layout.annotations[-1].text


def test_system_figure_shows_gpu_lines_only_when_there_is_a_gpu():
    cpu_only = Figure(system_figure([UsageSample(1.0, 50.0, 30.0), UsageSample(2.0, 60.0, 31.0)]))
    assert [trace.name for trace in cpu_only.data] == ["CPU", "RAM"]
    with_gpu = Figure(system_figure([UsageSample(1.0, 50.0, 30.0, 90.0, 40.0)]))
    assert [trace.name for trace in with_gpu.data] == ["CPU", "RAM", "GPU", "GPU memory"]


def test_nvidia_smi_output_is_averaged_over_gpus():
    assert parse_nvidia_smi("80, 1000, 4000\n40, 3000, 4000\n") == pytest.approx((60.0, 50.0))
    assert parse_nvidia_smi("[N/A], 1, 2\n") is None
    assert parse_nvidia_smi("") is None


def test_system_monitor_samples_cpu_and_ram_at_most_every_interval():
    monitor = SystemMonitor(min_interval=60.0, gpu=False)
    first = monitor.sample()
    second = monitor.sample()
    assert len(first) == 1 and len(second) == 1  # the second call came too soon
    assert 0.0 <= first[0].cpu_percent <= 100.0 and 0.0 < first[0].ram_percent < 100.0
    assert first[0].gpu_percent is None


# ----------------------------------------------------------------------------- status and tables


def test_status_line_shows_state_step_speed_eta_and_progress(tmp_path):
    run = snapshot_with(tmp_path, metrics_events(25))
    html = views.status_html(run)
    assert "training" in html and "12.8k" in html and "51.2k" in html and 'title="51,200"' in html
    assert "10,000 steps/s" in html
    assert "ETA 0:04" in html  # (51200 - 12800) / 10000 s
    assert 'style="width:25.0%"' in html


def test_status_line_of_a_failed_run_shows_the_error_escaped(tmp_path):
    run = snapshot_with(
        tmp_path,
        metrics_events(2),
        [
            {
                "type": "error",
                "time": 1010.0,
                "message": "ValueError: <bad> value",
                "traceback": "Traceback\n" + "\n".join(f"  line {i}" for i in range(40)) + "\nValueError: <bad>",
            },
            {"type": "end", "time": 1011.0, "status": "failed", "step": 1024, "final_model": None},
        ],
    )
    html = views.status_html(run)
    assert "failed" in html and "ValueError: &lt;bad&gt; value" in html and "<bad>" not in html
    assert html.count("line ") <= 15  # only the tail of the traceback


def test_runs_table_row_has_the_columns_people_look_for(tmp_path):
    run = snapshot_with(
        tmp_path,
        metrics_events(10),
        [{"type": "end", "time": 1020.0, "status": "finished", "step": 5120, "final_model": None}],
    )
    (row,) = views.runs_table_rows([run])
    assert dict(zip(views.RUNS_TABLE_HEADERS, row)) == {
        "run": "cartpole-ppo-small-1",
        "name": "",
        "env": "cartpole",
        "model": "ppo-small",
        "status": "finished",
        "steps": 5120,
        "score": "10.0 steps balanced",
        "best return": 10.0,
        "last return": 10.0,
        "wall time": "0:20",
        "disk (MiB)": round(run_size_bytes(run.run_dir) / 2**20, 2),  # its numbers: tests/test_retention.py
    }


def test_gif_caption_and_durations():
    # A GIF event from before the trainer said what the GIF shows: score and return only.
    assert (
        views.gif_caption(GifInfo("x.gif", 12288, 42.25, 3.0), "snake")
        == "Rollout at step 12,288: 3 food · return 42.2"
    )
    cut = GifInfo("x.gif", 12288, 1291.5, 31.0, steps_shown=300, episode_steps=2140, episode_ended=True)
    assert (
        views.gif_caption(cut, "flappy_bird")
        == "Rollout at step 12,288: first 300 of 2,140 steps · 31 pipes · return 1,291.5"
    )
    # A Gymnasium env: its score is the return, said once.
    assert views.gif_caption(cut, "Pendulum-v1") == "Rollout at step 12,288: first 300 of 2,140 steps · return 1,291.5"
    assert "first 300 of 2,140 steps" in views.gif_caption_html(cut) and "<script" not in views.gif_caption_html(cut)
    assert views.format_duration(3725) == "1:02:05" and views.format_duration(7.4) == "0:07"


def test_metrics_csv_has_one_row_per_update(tmp_path):
    events = metrics_events(7)
    run = snapshot_with(tmp_path, events)
    # The CSV is written from metrics.jsonl (every update), not from the in-memory curve.
    (Path(run.run_dir) / "metrics.jsonl").write_text("".join(json.dumps(event) + "\n" for event in events))
    path = views.write_metrics_csv(run)
    rows = list(csv.DictReader(open(path, encoding="utf-8")))
    assert len(rows) == 7
    assert rows[0]["episode_return_mean"] == "" and rows[-1]["episode_return_mean"] == "7.0"
    assert rows[-1]["step"] == str(7 * 512)


def test_batch_note_explains_the_batch_arithmetic():
    assert "8 × 128 = **1,024** samples, 4 minibatches of 256" in views.batch_note(8, 128, 256)
    assert "does not divide" in views.batch_note(8, 128, 100)


# ----------------------------------------------------------------------------- the form


def test_every_trainer_key_is_in_the_form_or_explained():
    from trainer.config.declaring import key_names

    keys = {name for name in key_names() if name != "checkpoint"}  # the shared keys and every algorithm's own
    keys |= {f"checkpoint.{f.name}" for f in dataclasses.fields(CheckpointConfig)}
    covered = {form_field.key for form_field in FORM_FIELDS} | set(NOT_IN_FORM)
    assert keys == covered
    assert all(form_field.help for form_field in FORM_FIELDS), "every control has the trainer's help text"


def test_form_round_trips_a_config():
    config = config_from_dict(
        {
            "env_name": "cartpole",
            "num_envs": 16,
            "num_steps": 64,
            "learning_rate": 1e-3,
            "target_kl": 0.02,
            "env_kwargs": {"max_episode_steps": 200},
            "checkpoint": {"interval": 7},
        }
    ).to_dict()
    values = form_values(config)
    again = validated_config(values, allow_custom_envs=False).to_dict()
    assert again == config


def test_the_guides_vector_env_true_shows_as_the_pool_it_means():
    config = config_from_dict({"env_name": "CartPole-v1", "vector_env": True, "num_workers": 8}).to_dict()
    shown = dict(zip((form_field.key for form_field in FORM_FIELDS), form_values(config)))
    assert shown["vector_env"] == "pool"


def test_bad_form_values_give_messages_that_name_the_key():
    values = form_values(tuned_config("cartpole"))
    keys = [form_field.key for form_field in FORM_FIELDS]

    def with_value(key, value):
        changed = list(values)
        changed[keys.index(key)] = value
        return changed

    with pytest.raises(ConfigError, match="num_envs must be a positive integer, got -4"):
        validated_config(with_value("num_envs", -4), False)
    with pytest.raises(ConfigError, match="mini_batch_size .* must divide"):
        validated_config(with_value("mini_batch_size", 1000), False)
    with pytest.raises(ConfigError, match="Unknown environment 'NoSuchGame-v9'"):
        validated_config(with_value("env_name", "NoSuchGame-v9"), False)
    with pytest.raises(FormError, match="total_timesteps is empty"):
        validated_config(with_value("total_timesteps", None), False)
    with pytest.raises(FormError, match="env_kwargs is not valid YAML"):
        validated_config(with_value("env_kwargs", "{a: [1"), False)


def test_custom_code_needs_the_allow_custom_envs_flag():
    with pytest.raises(FormError, match="--allow-custom-envs"):
        check_web_safety({"env_name": "evil.module:Env"}, allow_custom_envs=False)
    with pytest.raises(FormError, match="--allow-custom-envs"):
        check_web_safety({"env_name": "gym:evil.module:Env-v0"}, allow_custom_envs=False)
    with pytest.raises(FormError, match="--allow-custom-envs"):
        check_web_safety({"env_name": "cartpole", "wrappers": ["evil:Wrapper"]}, allow_custom_envs=False)
    with pytest.raises(FormError, match="checkpoint.path"):
        check_web_safety({"env_name": "cartpole", "checkpoint": {"path": "/etc"}}, allow_custom_envs=True)
    check_web_safety({"env_name": "evil.module:Env"}, allow_custom_envs=True)
    check_web_safety({"env_name": "gym:CartPole-v1"}, allow_custom_envs=False)
    check_web_safety({"env_name": "Acrobot-v1"}, allow_custom_envs=False)


def test_yaml_paste_fills_the_form_and_bad_yaml_says_where():
    config, notes = config_from_yaml_text(
        "env_name: FlappyBirdPygame-v0\nnum_envs: 32\ntotal_timesteps: 2_000_000\nbackend: gloo\n"
    )
    assert config["num_envs"] == 32 and config["total_timesteps"] == 2_000_000
    assert any("backend" in note for note in notes)
    with pytest.raises(FormError, match="line 3"):
        config_from_yaml_text("env_name: cartpole\nnum_envs: 8\n\tseed: 1\n")
    with pytest.raises(FormError, match="mapping"):
        config_from_yaml_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="learning_rat"):
        config_from_yaml_text("learning_rat: 0.1\n")


def test_raw_form_values_keep_optional_keys_empty():
    values = form_values(tuned_config("cartpole"))
    raw = raw_config_from_form(values)
    assert raw["target_kl"] is None and "checkpoint" in raw and "path" not in raw["checkpoint"]
