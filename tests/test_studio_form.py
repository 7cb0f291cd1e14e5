"""The Train form tells the truth: what it was filled with, which run it holds, no stale messages,
advice only when it is close; the Evaluate tab's preselection; the studio's console and /tmp.

Called directly (no server, no browser), with the fake trainers of test_studio_runs.
"""

from __future__ import annotations

import logging
import tempfile
from types import SimpleNamespace

import gradio as gr
import pytest

from envs.names import closest_name
from envs.registry import resolve_env_name
from studio import views
from studio.evaluate import EvaluationSummary, preselected_run
from studio.form import BASIC_FIELDS
from studio.scratch import ScratchFolder
from test_studio_runs import CONFIG, fake_endless_trainer, wait_for
from test_studio_ui import KEYS, SKIP, make_studio
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict


def test_environment_comes_first_in_the_form():
    assert BASIC_FIELDS[0].key == "env_name"
    assert [f.key for f in BASIC_FIELDS].index("model_type") == 1


def test_env_change_says_defaults_when_no_tuned_config_ships(tmp_path):
    studio = make_studio(tmp_path)
    *updates, message = studio.on_env_change("Pendulum-v1")
    assert "defaults for continuous (Box) actions (no tuned config for Pendulum-v1)" in message
    assert updates[KEYS.index("num_envs")] != SKIP  # the form was still filled (with the defaults)
    *_, message = studio.on_env_change("snake")
    assert "the tuned config configs/snake.yaml" in message


def test_env_change_to_an_unknown_env_says_so_and_leaves_the_form(tmp_path):
    studio = make_studio(tmp_path)
    *updates, message = studio.on_env_change("NotAnEnv-v9")
    assert "Unknown environment 'NotAnEnv-v9'" in message
    assert all(update == SKIP for update in updates)


def test_a_new_tab_shows_the_running_run_and_the_form_holds_its_settings(tmp_path):
    studio = make_studio(tmp_path, target=fake_endless_trainer)
    assert all(update == SKIP for update in studio.on_load())  # no run: the form keeps the defaults
    state = studio.manager.start({**CONFIG, "env_name": "snake", "num_envs": 6})
    try:
        run_id, timer, *values, message = studio.on_load()
        assert run_id == state.run_id and timer.active
        assert values[KEYS.index("env_name")] == "snake" and values[KEYS.index("num_envs")] == 6
        assert state.run_id in message
    finally:
        studio.manager.stop(state.run_id)
        wait_for(lambda: not studio.manager.get(state.run_id).is_active)


def test_load_the_shown_runs_settings_button(tmp_path):
    studio = make_studio(tmp_path)
    *updates, message = studio.on_load_run_settings("")
    assert all(update == SKIP for update in updates) and "No run is shown" in message
    state = studio.manager.start({**CONFIG, "learning_rate": 0.002})
    wait_for(lambda: not studio.manager.get(state.run_id).is_active)
    *values, message = studio.on_load_run_settings(state.run_id)
    assert values[KEYS.index("learning_rate")] == 0.002 and state.run_id in message


def test_open_from_the_runs_tab_puts_that_runs_settings_in_the_form(tmp_path):
    studio = make_studio(tmp_path)
    state = studio.manager.start({**CONFIG, "num_envs": 5})
    wait_for(lambda: not studio.manager.get(state.run_id).is_active)
    assert all(update == SKIP for update in studio.on_follow_run(None, state.run_id))  # Open did nothing
    *values, message = studio.on_follow_run(state.run_id, state.run_id)
    assert values[KEYS.index("num_envs")] == 5 and state.run_id in message


def test_stop_leaves_no_message_that_outlives_the_stopping(tmp_path):
    studio = make_studio(tmp_path, target=fake_endless_trainer)
    state = studio.manager.start(CONFIG)
    assert studio.on_stop(state.run_id) == ""  # the badge says "stopping"; a toast says the rest
    wait_for(lambda: not studio.manager.get(state.run_id).is_active)
    assert studio.on_stop("no-such-run").startswith("**")


@pytest.mark.parametrize("unrelated", ["NotAnEnv-v9", "MyGame-v0", "xyz"])
def test_no_advice_for_names_that_are_not_close(unrelated):
    with pytest.raises(ValueError) as error:
        resolve_env_name(unrelated)
    assert "Did you mean" not in str(error.value)


@pytest.mark.parametrize(
    "typo, meant",
    [
        ("flapy_bird", "flappy_bird"),
        ("Acrobat-v1", "Acrobot-v1"),
        ("pendulm-v1", "Pendulum-v1"),
        ("cartpol", "cartpole"),
    ],
)
def test_typos_still_get_the_closest_name(typo, meant):
    with pytest.raises(ValueError, match=f"Did you mean '{meant}'"):
        resolve_env_name(typo)


def test_one_rule_for_keys_and_choices_too():
    with pytest.raises(ConfigError, match="Did you mean 'total_timesteps'"):
        config_from_dict({"timesteps": 5})
    with pytest.raises(ConfigError) as error:
        config_from_dict({"model_type": "transformer"})
    assert "Did you mean" not in str(error.value)
    assert closest_name("ppo-smal", ["ppo-small", "ppo-cnn"]) == "ppo-small"
    assert closest_name("Snake-V0", ["Snake-v0"]) == "Snake-v0"  # case-insensitive, spelled as known


def test_batch_note_writes_big_numbers_readably():
    note = views.batch_note(8, 256, 512, 20_000_000)
    assert "**20,000,000**" in note and "9,766 updates" in note and "20,000,768 steps" in note
    assert "20000000" not in note


def test_the_scratch_folder_is_made_only_when_a_file_needs_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    studio = make_studio(tmp_path / "studio")
    assert list(tmp_path.glob("rl-studio-*")) == []  # a studio start leaves nothing in /tmp
    path = studio.scratch.file("evaluations", "a.gif")
    assert path.parent.is_dir() and path.parent.parent.name.startswith("rl-studio-")
    studio.scratch.cleanup()
    assert list(tmp_path.glob("rl-studio-*")) == []
    ScratchFolder().cleanup()  # never used: nothing to remove, no error


def test_an_api_user_error_is_one_log_line_without_traceback(tmp_path, caplog):
    studio = make_studio(tmp_path)
    with caplog.at_level(logging.WARNING, logger="studio"), pytest.raises(gr.Error):
        studio.api_start("cartpole", {"bogus_key": 1})
    records = [record for record in caplog.records if record.name == "studio"]
    assert len(records) == 1 and records[0].exc_info is None
    assert "/start" in records[0].getMessage() and "bogus_key" in records[0].getMessage()
    assert "\n" not in records[0].getMessage()


def _run(run_id, status, final_model=None, checkpoint=None):
    return SimpleNamespace(run_id=run_id, status=status, final_model=final_model, latest_checkpoint=checkpoint)


def test_evaluate_preselects_the_newest_finished_runs_model():
    runs = [
        _run("c-training", "running", checkpoint="c/ckpt.pth"),
        _run("b-done", "finished", "b/final.pth"),
        _run("a-done", "finished", "a/final.pth"),
        _run("z-empty", "failed"),
    ]
    assert preselected_run(runs) == "b-done"
    assert preselected_run(runs, current="a-done") == "a-done"  # the visitor's own pick stays
    assert preselected_run(runs, current="z-empty") == "b-done"  # ... while it still has a model
    assert preselected_run([_run("c-training", "running", checkpoint="c/ckpt.pth")]) == "c-training"
    assert preselected_run([]) is None


def test_evaluate_tab_picks_a_run_and_its_final_model(tmp_path):
    studio = make_studio(tmp_path)
    state = studio.manager.start(CONFIG)
    wait_for(lambda: not studio.manager.get(state.run_id).is_active)
    picked = studio.on_evaluate_tab(None)
    assert picked.value == state.run_id and state.run_id in picked.choices[0]
    files = studio.model_files(picked.value)
    assert files.value == "cartpole_ppo_final.pth"


def test_evaluate_says_which_file_it_evaluated(tmp_path, monkeypatch):
    import studio.evaluate

    studio_ = make_studio(tmp_path)
    state = studio_.manager.start(CONFIG)
    wait_for(lambda: not studio_.manager.get(state.run_id).is_active)
    evaluated = []

    def fake_evaluate(path, **kwargs):  # the playing itself is tested in test_studio_ui / test_api
        evaluated.append(path)
        return EvaluationSummary("cartpole", 1000, 3, True, 10.0, 1.0, 10.0, 1.0, 0, None)

    monkeypatch.setattr(studio.evaluate, "evaluate_checkpoint", fake_evaluate)
    message, _ = studio_.on_evaluate("run", state.run_id, "cartpole_ppo_final.pth", None, 3, True)
    assert message.startswith("### ")  # the headline (the score) stays first
    assert f"Model file: `cartpole_ppo_final.pth` of **{state.run_id}**" in message
    assert evaluated and evaluated[0].endswith("cartpole_ppo_final.pth")


def test_choosing_an_algorithm_fills_the_form_with_its_tuned_config_for_the_env(tmp_path):
    """PPO's tuned CartPole settings (learning_rate 4e-3, 32 steps a rollout) do not train DQN:
    picking dqn loads configs/cartpole_dqn.yaml; an env without a tuned DQN config gets DQN's defaults."""
    from trainer.config.defaults import UNTUNED_REPLAY_DEFAULTS, read_yaml_mapping, shipped_config_path

    studio = make_studio(tmp_path)
    *updates, message = studio.on_env_change("cartpole", "dqn")
    tuned = read_yaml_mapping(shipped_config_path("cartpole", "dqn"))
    assert "the tuned config configs/cartpole_dqn.yaml" in message
    assert updates[KEYS.index("learning_rate")] == float(tuned["learning_rate"])
    assert updates[KEYS.index("algo")] == SKIP  # the user's choice stays
    *updates, message = studio.on_env_change("Acrobot-v1", "dqn")
    assert "the defaults for dqn (no tuned config for Acrobot-v1 with dqn)" in message
    assert updates[KEYS.index("num_envs")] == UNTUNED_REPLAY_DEFAULTS["dqn"]["num_envs"]


# ----------------------------------------------------------------------------- issue 27's rough edges


def test_evaluate_prefers_the_run_last_viewed_while_it_has_a_model():
    runs = [
        _run("c-stopped", "stopped", "c/final.pth"),  # just stopped: its model is saved, yet not "finished"
        _run("b-done", "finished", "b/final.pth"),
        _run("a-training", "running"),  # no model yet
    ]
    assert preselected_run(runs, viewed="c-stopped") == "c-stopped"
    assert preselected_run(runs, current="b-done", viewed="c-stopped") == "c-stopped"  # viewed since
    assert preselected_run(runs, current="b-done", viewed="a-training") == "b-done"  # nothing to play there


def test_the_batch_note_shows_the_preflight_warnings_as_text(tmp_path):
    from studio.form import FORM_FIELDS, form_values

    studio = make_studio(tmp_path)
    config = tuned_config_for_test({"num_envs": 1024, "num_steps": 32, "total_timesteps": 10_000})
    note = studio.on_batch_note(*form_values(config))
    assert "1,024 × 32 = **32,768** samples" in note
    assert "⚠ one update collects num_envs x num_steps" in note
    values = form_values(tuned_config_for_test({}))
    assert "⚠" not in studio.on_batch_note(*values)
    assert len(values) == len(FORM_FIELDS)


def tuned_config_for_test(settings: dict) -> dict:
    from studio.form import tuned_config

    return {**tuned_config("cartpole"), **settings}


def test_an_error_shows_as_written_in_a_message_box():
    from studio.handlers import bold_message

    message = bold_message("The YAML: line 1 uses a YAML alias (*name); <b>x</b>, num_envs")
    assert message.startswith("**") and "(\\*name)" in message and "&lt;b&gt;" in message and "num_envs" in message
