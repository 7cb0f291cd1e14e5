"""Features around the loop: continuous actions through the Gymnasium adapter, the progress
bar on a terminal, optional TensorBoard, lr_scaling, evaluate() from Python."""

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.config.defaults import load_config
from trainer.run.checkpoint import load_model
from trainer.run.events import read_events
from trainer.run.loop import train

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "num_envs=4",
    "num_steps=16",
    "mini_batch_size=32",
    "update_epochs=1",
    "gif_interval=0",
    "torch_threads=1",
    "device=cpu",
]


def test_continuous_actions_through_the_gymnasium_adapter(tmp_path):
    config = load_config(
        None,
        TINY
        + ["env_name=Pendulum-v1", "total_timesteps=128", "norm_obs=true", "norm_reward=true", "model_type=ppo-medium"],
    )
    result = train(config, tmp_path / "run")
    model = load_model(result.final_model)
    policy = model.policy
    obs = np.array([0.5, -0.3, 0.8], dtype=np.float32)
    with torch.no_grad():
        mean = policy.actor(policy.normalize_obs(torch.from_numpy(obs).unsqueeze(0)))[0]
        std = policy.log_std.exp()
    # Deterministic: the Gaussian head's mean, clipped to Pendulum's torque bounds [-2, 2].
    action, _ = model.predict(obs)
    assert action.shape == (1,)
    np.testing.assert_allclose(action, mean.clamp(-2.0, 2.0).numpy(), rtol=1e-5, atol=1e-6)
    # Stochastic: samples of N(mean, std) clipped to the bounds, like a reference sampler's.
    torch.manual_seed(0)
    samples, _ = model.predict(np.tile(obs, (40_000, 1)), deterministic=False)
    assert samples.shape == (40_000, 1)
    reference = (mean + std * torch.randn(400_000, 1, generator=torch.Generator().manual_seed(1))).clamp(-2.0, 2.0)
    assert samples.mean() == pytest.approx(reference.mean().item(), abs=0.02)
    assert samples.std() == pytest.approx(reference.std().item(), abs=0.02)
    assert (np.abs(samples) == 2.0).mean() == pytest.approx((reference.abs() == 2.0).float().mean().item(), abs=0.01)
    # Observation statistics travel with the model.
    assert model.policy.obs_normalizer is not None and float(model.policy.obs_normalizer.count) > 100


def test_a_convolutional_policy_trains_on_grid_observations(tmp_path):
    # The rollout's convolutional path (no folded MLP), the rollout scoring and the autograd update.
    config = load_config(
        None,
        TINY + ["env_name=snake", "env_kwargs={obs: grid, grid_size: 8}", "model_type=ppo-cnn", "total_timesteps=128"],
    )
    result = train(config, tmp_path / "run")
    metrics = result.last_metrics
    assert metrics["gradient_steps"] == 2 and np.isfinite(metrics["policy_loss"])
    # The second minibatch sees the policy the first one moved: pi / pi_old is no longer 1.
    assert metrics["approx_kl"] > 0
    model = load_model(result.final_model)
    obs = np.random.default_rng(0).random((32, *model.policy.spec["obs_shape"]), dtype=np.float32)
    actions, _ = model.predict(obs)
    with torch.no_grad():  # deterministic actions: the most likely action of the trained head
        logits = model.policy.actor(model.policy.torso(torch.from_numpy(obs)))
    np.testing.assert_array_equal(actions, logits.argmax(-1).numpy())


def test_lr_scaling_sqrt_scales_from_the_reference_batch(tmp_path):
    config = load_config(
        None,
        TINY
        + ["total_timesteps=64", "lr_scaling=sqrt", "lr_reference_batch=8", "learning_rate=1e-3", "anneal_lr=false"],
    )
    result = train(config, tmp_path / "run")
    assert result.last_metrics["learning_rate"] == pytest.approx(1e-3 * 2.0)  # sqrt(32 / 8)
    logs = [event["message"] for event in read_events(tmp_path / "run" / "metrics.jsonl") if event["type"] == "log"]
    assert any("lr_scaling sqrt" in message for message in logs)


def test_tensorboard_without_the_package_is_a_warning_not_a_failure(tmp_path):
    config = load_config(None, TINY + ["total_timesteps=64", "tensorboard=true"])
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        result = train(config, tmp_path / "run")
        assert result.status == "finished"
        warnings = [
            event
            for event in read_events(tmp_path / "run" / "metrics.jsonl")
            if event["type"] == "log" and event["level"] == "warning"
        ]
        assert any("pip install tensorboard" in event["message"] for event in warnings)
    else:
        train(config, tmp_path / "run")
        assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_evaluate_from_python(tmp_path):
    from trainer.serving.evaluate import evaluate

    result = train(load_config(None, TINY + ["total_timesteps=64"]), tmp_path / "run")
    evaluation = evaluate(result.final_model, episodes=7, num_envs=3)
    assert evaluation.episodes == 7 and len(evaluation.scores) == 7
    # CartPole's score is the episode length, and its return is one per step.
    assert evaluation.scores == [float(length) for length in evaluation.lengths] == evaluation.returns
    assert evaluation.return_std == pytest.approx(float(np.std(evaluation.returns)))


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_only_on_a_terminal(tmp_path):
    args = [sys.executable, "-m", "trainer", "--set", "total_timesteps=2048", "--runs-dir", str(tmp_path)]
    args += [item for pair in zip(["--set"] * len(TINY), TINY) for item in pair]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    main, child = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a 120-column terminal
    process = subprocess.Popen(args, cwd=ROOT, stdout=child, stderr=child, env=env)
    os.close(child)
    output = b""
    while True:
        ready, _, _ = select.select([main], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    process.wait(timeout=60)
    os.close(main)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert "\r" in text and "step" in text and "%" in text  # tqdm's bar
    assert "[STEP 2048]" in text  # log lines still print


def test_wrappers_route_a_builtin_through_gymnasium(tmp_path):
    config = load_config(None, TINY + ["total_timesteps=64", "wrappers=[gymnasium.wrappers:RecordEpisodeStatistics]"])
    result = train(config, tmp_path / "run")
    assert result.status == "finished"
    # A Gymnasium-backed env cannot be snapshotted: its checkpoints carry no env state.
    from trainer.run.checkpoint import latest_checkpoint

    _, payload = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert payload["env_state"] is None


def test_checkpoint_path_inside_the_run_directory_and_resume_finds_it(tmp_path):
    config = load_config(None, TINY + ["total_timesteps=128", "checkpoint.path=saved", "checkpoint.interval=1"])
    train(config, tmp_path / "run")
    assert sorted(path.name for path in (tmp_path / "run" / "saved").glob("*.pth")) == ["ckpt_128.pth", "ckpt_64.pth"]
    longer = load_config(None, TINY + ["total_timesteps=192", "checkpoint.path=saved", "checkpoint.interval=1"])
    assert train(longer, tmp_path / "run", resume=True).step == 192
