"""DQN and SAC as first-class citizens: a trained model reloads and plays (evaluate), a GIF is
recorded, the ONNX export matches PyTorch in onnxruntime, the policy server answers with the
model's actions, Prometheus exports the off-policy diagnostics, and the Gymnasium adapter and the
worker pool feed the replay buffer."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import torch
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from test_metrics_export import samples
from trainer.config.validation import config_from_dict
from trainer.nets.q_network import QNetwork
from trainer.run.checkpoint import load_model
from trainer.run.layout import events_path
from trainer.run.loop import train
from trainer.serving.evaluate import evaluate
from trainer.serving.export import export_onnx
from trainer.serving.metrics_export import MetricsSink, RunsCollector
from trainer.serving.serve import create_app

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {
    "num_envs": 4,
    "num_steps": 2,
    "learning_starts": 64,
    "mini_batch_size": 32,
    "buffer_size": 2_000,
    "total_timesteps": 1_600,
    "gif_interval": 10_000,  # only the GIF after training
    "seed": 3,
    "device": "cpu",
    "anneal_lr": False,
    "checkpoint": {"interval": 0},
}
RUNS = {
    "dqn": {"env_name": "cartpole", "algo": "dqn", "dueling": True, "n_step": 3, "use_per": True},
    "sac": {"env_name": "Pendulum-v1", "algo": "sac", "n_step": 2, "hidden_sizes": [32, 32], "gradient_steps": 2},
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def trained(request, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    result = train(config_from_dict({**SMALL, **RUNS[request.param]}), run_dir)
    return run_dir, result


def test_the_trained_model_reloads_plays_and_was_recorded(trained):
    run_dir, result = trained
    model = load_model(result.final_model)
    assert type(model.policy).__name__ == type(result.policy).__name__
    for name, tensor in result.policy.state_dict().items():
        assert torch.equal(tensor.cpu(), model.policy.state_dict()[name]), name
    report = evaluate(model, episodes=2)
    assert report.episodes == 2 and math.isfinite(report.return_mean)
    assert list(run_dir.glob("**/*.gif")), "no GIF of the agent"


def test_the_metrics_events_carry_the_off_policy_diagnostics(trained):
    run_dir, _ = trained
    import json

    events = [json.loads(line) for line in events_path(run_dir).read_text().splitlines()]
    metrics = [event for event in events if event["type"] == "metrics"]
    warm_up, learned = metrics[0], metrics[-1]
    assert warm_up["gradient_steps"] == 0 and warm_up["value_loss"] is None  # before learning_starts
    assert learned["gradient_steps"] > 0 and math.isfinite(learned["q_value_mean"])
    assert learned["buffer_size"] == min(SMALL["buffer_size"], SMALL["total_timesteps"])
    if "epsilon" in learned:
        assert 0.0 <= learned["epsilon"] < 1.0
    sink = MetricsSink()
    for event in events:
        sink(event)
    registry = CollectorRegistry()
    registry.register(RunsCollector(lambda: [sink.sample()], run_dir.parent, gpus=lambda: []))
    found = samples(generate_latest(registry).decode())
    assert found["rlstudio_q_value_mean"][0].value == pytest.approx(learned["q_value_mean"])
    assert found["rlstudio_replay_buffer_transitions"][0].value == learned["buffer_size"]
    assert found["rlstudio_nonfinite_losses"][0].value == 0


def test_the_onnx_export_plays_as_the_model_does(trained, tmp_path):
    run_dir, _ = trained
    model = load_model(next(run_dir.glob("*_final.pth")))
    path = export_onnx(run_dir, tmp_path / "agent.onnx", with_details=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    obs = np.random.default_rng(0).normal(0, 1, (64, *model.observation_shape)).astype(np.float32)
    outputs = session.run(None, {"obs": obs})
    names = [output.name for output in session.get_outputs()]
    expected_action = model.predict(obs, deterministic=True)[0]
    with torch.no_grad():
        details = model.policy.exported(model.policy.normalize_obs(torch.as_tensor(obs)), True)
    for name, got, want in zip(names[1:], outputs[1:], details[1:], strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    if isinstance(model.policy, QNetwork):
        assert names == ["action", "q_values"]
        np.testing.assert_array_equal(outputs[0], outputs[1].argmax(-1))
        np.testing.assert_array_equal(outputs[0], expected_action)
    else:
        np.testing.assert_allclose(outputs[0], expected_action, rtol=1e-4, atol=1e-5)


def test_the_policy_server_answers_with_the_models_actions(trained):
    run_dir, _ = trained
    model = load_model(next(run_dir.glob("*_final.pth")))
    client = TestClient(create_app(model, max_rows=64))
    obs = np.random.default_rng(1).normal(0, 1, (16, *model.observation_shape)).astype(np.float32)
    response = client.post("/v1/act", json={"obs": obs.tolist(), "deterministic": True})
    assert response.status_code == 200
    np.testing.assert_allclose(response.json()["actions"], model.predict(obs, deterministic=True)[0], atol=1e-5)


@pytest.mark.parametrize("vectorization", [{}, {"vector_env": "pool", "num_workers": 2}])
def test_gymnasium_envs_and_the_worker_pool_feed_the_replay_buffer(tmp_path, vectorization):
    config = {**SMALL, "env_name": "Acrobot-v1", "algo": "dqn", "total_timesteps": 400, "gif_interval": 0}
    result = train(config_from_dict({**config, **vectorization}), tmp_path / "run")
    assert result.status == "finished" and result.last_metrics["buffer_size"] == 400
    assert result.last_metrics["gradient_steps"] > 0


@pytest.mark.parametrize(("algo", "env_name", "fits"), [("sac", "cartpole", "dqn"), ("dqn", "Pendulum-v1", "sac")])
def test_an_algorithm_for_the_other_kind_of_actions_is_refused_before_the_run_starts(tmp_path, algo, env_name, fits):
    from trainer.config.checks import ConfigError

    with pytest.raises(ConfigError, match=f"algo {algo} takes .* actions, but {env_name} has .*use algo .*{fits}"):
        train(config_from_dict({**SMALL, "env_name": env_name, "algo": algo}), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing was written
