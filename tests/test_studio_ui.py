"""The page's event functions, called directly (no server, no browser), with fake trainers.

What a user would notice: a bad form gives a message and starts nothing; a live view that has
nothing new to show sends nothing (no chart redraw, no new file in Gradio's cache); files
outside the runs folder are never handed to the browser; bad .pth files give a message.
"""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import gradio as gr
import pytest
import torch

from studio.callbacks import Studio
from studio.form import FORM_FIELDS, form_values, tuned_config
from studio.handlers import DOWNLOAD_KINDS
from studio.http_api import merged_settings
from studio.runs import RunManager
from test_studio_runs import CONFIG, fake_endless_trainer, fake_trainer, wait_for

KEYS = [form_field.key for form_field in FORM_FIELDS]
SKIP = gr.skip()


def file_of(component) -> str | None:
    """The file path a DownloadButton / Image update carries (None for none)."""
    value = component.value
    return value.get("path") if isinstance(value, dict) else value


def make_studio(tmp_path, target=fake_trainer, **kwargs) -> Studio:
    return Studio(RunManager(tmp_path / "runs", target=target, max_concurrent_runs=kwargs.pop("limit", 2)), **kwargs)


def form(**changes):
    values = form_values(tuned_config("cartpole"))
    for key, value in changes.items():
        values[KEYS.index(key)] = value
    return values


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"num_envs": -4}, "num_envs must be a positive integer, got -4"),
        ({"env_name": "NoSuchGame-v9"}, "Unknown environment 'NoSuchGame-v9'"),
        ({"mini_batch_size": 1000}, "mini_batch_size (1000) must divide batch_size"),
        ({"env_name": "os:system"}, "--allow-custom-envs"),
        ({"total_timesteps": None}, "total_timesteps is empty"),
        ({"learning_rate": 5.0}, "learning_rate must be in (0.0, 1.0], got 5.0"),
    ],
)
def test_bad_form_shows_a_message_and_starts_nothing(tmp_path, changes, expected):
    studio = make_studio(tmp_path)
    message, run_id, timer, viewed = studio.on_start(*form(**changes))
    assert expected in message
    assert run_id == SKIP and timer == SKIP
    assert studio.manager.list_runs() == []


def test_start_beyond_the_limit_says_why(tmp_path):
    studio = make_studio(tmp_path, target=fake_endless_trainer, limit=1)
    first_message, first_run, _, _ = studio.on_start(*form())
    assert first_message.startswith("Started")
    message, run_id, _, _ = studio.on_start(*form())
    assert "allows 1 at a time" in message and run_id == SKIP
    studio.manager.shutdown(timeout=10)


def test_yaml_that_does_not_parse_gives_a_message_and_leaves_the_form(tmp_path):
    studio = make_studio(tmp_path)
    *updates, message = studio.on_load_yaml("env_name: cartpole\nnum_envs: 8\n\tseed: 1\n")
    assert "not valid YAML at line 3" in message
    assert all(update == SKIP for update in updates)
    *values, message = studio.on_load_yaml("env_name: snake\nnum_envs: 12\nlearning_rate: 0.001\n")
    assert values[KEYS.index("num_envs")] == 12 and values[KEYS.index("env_name")] == "snake"
    assert values[KEYS.index("learning_rate")] == 0.001


def test_env_change_fills_the_form_from_the_tuned_config_but_keeps_env_and_device(tmp_path):
    studio = make_studio(tmp_path)
    *updates, message = studio.on_env_change("snake")
    expected = form_values(tuned_config("snake"))
    assert updates[KEYS.index("env_name")] == SKIP and updates[KEYS.index("device")] == SKIP
    assert updates[KEYS.index("num_envs")] == expected[KEYS.index("num_envs")]
    assert "snake" in message


def test_live_view_sends_nothing_new_when_nothing_changed(tmp_path):
    studio = make_studio(tmp_path)
    _, run_id, _, viewed = studio.on_start(*form())
    wait_for(lambda: not studio.manager.get(run_id).is_active)
    first = studio.on_tick(run_id, viewed)
    status, reward, gif, caption, log, diagnostics, *downloads = first[: 6 + len(DOWNLOAD_KINDS)]
    viewed = first[-1]
    assert "finished" in status
    assert reward != SKIP and gif != SKIP and diagnostics != SKIP
    model_button = downloads[0]
    assert Path(file_of(model_button)).name == "cartpole_ppo_final.pth"
    assert first[-2] != SKIP  # the timer is switched off: the run is over

    second = studio.on_tick(run_id, viewed)
    reward, gif, caption, log, diagnostics, *downloads = second[1 : 6 + len(DOWNLOAD_KINDS)]
    assert [reward, gif, caption, log, diagnostics, *downloads] == [SKIP] * (5 + len(DOWNLOAD_KINDS))


def test_while_a_run_trains_charts_and_log_are_redrawn_at_most_every_chart_seconds(tmp_path):
    studio = make_studio(tmp_path, target=fake_endless_trainer, chart_seconds=0.5)
    _, run_id, _, viewed = studio.on_start(*form())
    wait_for(lambda: len(studio.manager.get(run_id).metrics) >= 2)

    def redrawn(tick) -> tuple[bool, bool]:
        status, reward, gif, caption, log = tick[:5]
        return reward != SKIP, log != SKIP

    first = studio.on_tick(run_id, viewed)
    assert redrawn(first) == (True, True)
    wait_for(lambda: len(studio.manager.get(run_id).metrics) >= 6)  # new points and log lines
    assert studio.manager.get(run_id).is_active
    second = studio.on_tick(run_id, first[-1])
    assert redrawn(second) == (False, False)  # too soon after the last redraw
    time.sleep(0.6)
    third = studio.on_tick(run_id, second[-1])
    assert redrawn(third)[1] is True  # the log: due again
    if not redrawn(third)[0]:  # a new picture went out without the charts (the browser draws it sooner)...
        assert third[2] != SKIP and third[-1]["picture_only"]
        third = studio.on_tick(run_id, third[-1])  # ...and they follow on the next tick, picture or not
    assert redrawn(third)[0] is True
    studio.manager.shutdown(timeout=10)


def test_files_outside_the_runs_folder_are_never_shown(tmp_path):
    studio = make_studio(tmp_path)
    run_dir = studio.manager.runs_dir / "crafted-run"
    run_dir.mkdir(parents=True)
    events = [
        {
            "type": "start",
            "time": time.time(),
            "run_id": "crafted-run",
            "config": CONFIG,
            "device": "cpu",
            "total_timesteps": 1000,
            "resumed_from_step": None,
        },
        {
            "type": "gif",
            "time": time.time(),
            "step": 1,
            "path": "/etc/passwd",
            "episode_return": 1,
            "episode_score": 1,
            "frames": 1,
        },
        {"type": "end", "time": time.time(), "status": "finished", "step": 1, "final_model": "/etc/passwd"},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    outputs = studio.on_tick("crafted-run", {})
    gif, downloads = outputs[2], outputs[6 : 6 + len(DOWNLOAD_KINDS)]
    assert file_of(gif) is None
    assert file_of(downloads[0]) is None and downloads[0].interactive is False
    with pytest.raises(gr.Error):
        studio.api_poll("../../etc")
    with pytest.raises(gr.Error):
        studio.api_download("..", "config")


def test_api_settings_override_the_tuned_config_without_batch_clashes():
    base = tuned_config("cartpole")
    raw = merged_settings(base, {"num_envs": base["num_envs"] * 2, "checkpoint.interval": 3})
    assert "batch_size" not in raw and raw["checkpoint"]["interval"] == 3
    with pytest.raises(ValueError, match="mapping"):
        merged_settings(base, ["num_envs", 4])  # type: ignore[arg-type]


def test_evaluate_refuses_unsafe_and_broken_files_with_a_message(tmp_path):
    studio = make_studio(tmp_path)

    class RunsCode:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "pwned",))

    malicious = tmp_path / "malicious.pth"
    torch.save({"format": "rl-studio", "payload": RunsCode()}, malicious, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    message, gif = studio.on_evaluate("upload", None, None, str(malicious), 5, True)
    assert message.startswith("**Could not use malicious.pth") and gif == SKIP
    assert "Traceback" not in message
    assert not (tmp_path / "pwned").exists()

    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a model at all")
    message, _ = studio.on_evaluate("upload", None, None, str(garbage), 5, True)
    assert message.startswith("**Could not use garbage.pth") and "Traceback" not in message

    message, _ = studio.on_evaluate("upload", None, None, str(garbage), -3, True)
    assert "episodes must be a whole number" in message
    message, _ = studio.on_evaluate("run", None, None, None, 5, True)
    assert "Pick a run" in message
