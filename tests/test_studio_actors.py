"""Actor-learner runs from the studio (issue 24): `local_actors` in the form starts a learner and
its actors, as `python -m trainer --actors N` does. The runs are real and short (CartPole)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cluster_view import run_nodes_html
from studio.form import FORM_FIELDS
from studio.runs import RunManager
from test_studio_cluster import RUN_SECONDS, events
from test_studio_runs import wait_for
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.run.layout import NODES_FILE

APPO = {
    "env_name": "cartpole",
    "algo": "appo",
    "local_actors": 2,
    "total_timesteps": 4096,
    "num_envs": 8,
    "num_steps": 32,
    "mini_batch_size": 128,
    "gif_interval": 0,
    "checkpoint": {"interval": 4},
    "log_interval": 1,
    "device": "cpu",
}


def test_local_actors_is_a_form_field_and_only_algorithms_that_take_actors_accept_it():
    assert "local_actors" in [form_field.key for form_field in FORM_FIELDS]
    assert config_from_dict(APPO).local_actors == 2
    with pytest.raises(
        ConfigError, match=r"local_actors: algo ppo learns from its own rollouts; actors feed algo .*appo"
    ):
        config_from_dict({**APPO, "algo": "ppo"})
    with pytest.raises(ConfigError, match=r"local_actors \(2\) and nproc_per_node \(2\)"):
        config_from_dict({**APPO, "nproc_per_node": 2})
    with pytest.raises(ConfigError, match="local_actors"):
        config_from_dict({**APPO, "local_actors": -1})


def test_a_studio_run_with_two_local_actors_learns_from_them_and_lists_them(tmp_path):
    manager = RunManager(tmp_path)
    state = manager.start(config_from_dict(APPO).to_dict())
    wait_for(lambda: manager.active_count() == 0, timeout=RUN_SECONDS)
    run = manager.get(state.run_id)
    assert run.status == "finished", run.error_message
    run_dir = Path(run.run_dir)
    metrics = [event for event in events(run_dir) if event["type"] == "metrics"]
    assert metrics[-1]["step"] == run.step >= 4096
    assert max(event["actors"] or 0 for event in metrics) == 2, "the learner learned from two actors"
    log = (run_dir / "train.log").read_text()
    assert log.count("Actor connected") == 2
    assert "RL_STUDIO_TOKEN=<token: shown on the page that started the run>" in log, (
        "the actors' token stays out of the log"
    )
    table = json.loads((run_dir / NODES_FILE).read_text())
    assert [row["role"] for row in table["nodes"]] == ["actor", "actor"] and table["finished"]
    assert "actor" in run_nodes_html(run.run_dir).lower()
    manager.shutdown()


@pytest.mark.slow
def test_stopping_a_studio_actor_learner_run_saves_and_ends_stopped(tmp_path):
    manager = RunManager(tmp_path)
    state = manager.start(config_from_dict({**APPO, "total_timesteps": 10_000_000}).to_dict())
    wait_for(lambda: manager.get(state.run_id).step > 0, timeout=RUN_SECONDS)
    manager.stop(state.run_id)
    wait_for(lambda: manager.active_count() == 0, timeout=RUN_SECONDS)
    run = manager.get(state.run_id)
    assert run.status == "stopped" and run.final_model
    manager.shutdown()


def test_a_learner_and_its_actors_hold_a_slot_each_in_the_run_queue():
    from studio.trainer_process import launcher_shape

    assert launcher_shape(config_from_dict(APPO).to_dict()) == (3, 1)
    assert launcher_shape(config_from_dict({**APPO, "local_actors": 0}).to_dict()) == (1, 1)
