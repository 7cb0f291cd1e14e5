"""ONNX export: the exported graph acts as the PyTorch policy does (every model type, random and
real observations, any batch size), carries its metadata, and plays CartPole-v1 with
onnxruntime alone, in a process that never imports torch."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime", reason="optional extra: pip install -r requirements-export.txt")
pytest.importorskip("onnx", reason="optional extra: pip install -r requirements-export.txt")

from trainer.config.defaults import load_config
from trainer.config.validation import config_from_dict
from trainer.nets.build import build_policy  # noqa: E402
from trainer.nets.spec import make_policy_spec  # noqa: E402
from trainer.run.checkpoint import TrainedModel, load_model  # noqa: E402
from trainer.run.loop import train  # noqa: E402
from trainer.serving.export import ExportError, export_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {
    "num_envs": 8,
    "num_steps": 16,
    "mini_batch_size": 64,
    "update_epochs": 1,
    "total_timesteps": 8 * 16 * 3,
    "gif_interval": 0,
    "seed": 5,
    "device": "cpu",
    "checkpoint": {"interval": 0},
}
TRAINED = {  # a few updates each, so that the normalisation statistics are far from (0, 1)
    "mlp-discrete-normobs": {"env_name": "cartpole", "model_type": "ppo-small", "norm_obs": True},
    "mlp-continuous-normobs": {"env_name": "Pendulum-v1", "model_type": "ppo-medium", "norm_obs": True},
    "cnn-grid": {"env_name": "snake", "model_type": "ppo-cnn", "env_kwargs": {"obs": "grid", "grid_size": 8}},
}


@pytest.fixture(scope="module", params=sorted(TRAINED))
def trained(request, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    result = train(config_from_dict({**TINY, **TRAINED[request.param]}), run_dir)
    return run_dir, load_model(result.final_model)


def image_model() -> TrainedModel:
    """A CNN on 0..255 RGB images (the Nature-DQN torso, 1/255 scaling inside), untrained."""
    spec = make_policy_spec("ppo-cnn", gymnasium.spaces.Box(0, 255, (64, 64, 3)), gymnasium.spaces.Discrete(5))
    torch.manual_seed(0)
    policy = build_policy(spec).eval()
    return TrainedModel(
        policy, {"policy_spec": spec, "config": {"env_name": "images"}, "global_step": 7}, torch.device("cpu")
    )


def onnx_session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def torch_outputs(model: TrainedModel, obs: np.ndarray):
    policy = model.policy
    with torch.no_grad():
        normalized = policy.normalize_obs(torch.as_tensor(obs))
        actor_input, critic_input = policy._features(normalized)
        head = policy.actor(actor_input)
        value = policy.critic(critic_input).squeeze(-1)
    detail = head.softmax(-1) if policy.discrete else head
    return model.predict(obs, deterministic=True)[0], detail.numpy(), value.numpy()


def real_observations(model: TrainedModel, steps: int = 40) -> np.ndarray:
    from envs import make_vec_env

    config = model.config
    env = make_vec_env(config["env_name"], 4, device="cpu", seed=11, **config.get("env_kwargs", {}))
    try:
        obs, seen = env.reset(seed=11), []
        for _ in range(steps):
            seen.append(obs.numpy().copy())
            obs = env.step(torch.as_tensor(model.predict(obs.numpy(), deterministic=False)[0]))[0]
        return np.concatenate(seen).astype(np.float32)
    finally:
        env.close()


def assert_parity(model: TrainedModel, onnx_path: Path, obs: np.ndarray) -> dict:
    action, detail, value = onnx_session(onnx_path).run(None, {"obs": obs})
    expected_action, expected_detail, expected_value = torch_outputs(model, obs)
    np.testing.assert_allclose(detail, expected_detail, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, expected_value, rtol=1e-4, atol=1e-4)
    if model.policy.discrete:
        # argmax of probabilities equal to 1e-5: the action may differ only where two are tied
        gap = np.sort(expected_detail, axis=-1)
        untied = (gap[:, -1] - gap[:, -2]) > 1e-4
        np.testing.assert_array_equal(action[untied], expected_action[untied])
        assert action.dtype == np.int64
    else:
        np.testing.assert_allclose(action, expected_action, rtol=1e-4, atol=1e-5)
        low, high = model.spec["action"]["low"], model.spec["action"]["high"]
        assert (action >= np.array(low) - 1e-6).all() and (action <= np.array(high) + 1e-6).all()
    return {
        "max_abs_detail": float(np.abs(detail - expected_detail).max()),
        "max_abs_value": float(np.abs(value - expected_value).max()),
    }


def test_exported_policy_matches_pytorch_on_random_and_real_observations(trained, tmp_path):
    run_dir, model = trained
    path = export_onnx(run_dir, tmp_path / "agent.onnx", with_details=True)  # the run folder: its final model
    rng = np.random.default_rng(0)
    shape = model.observation_shape
    real = real_observations(model)
    spread = real.std(0) + 1.0
    for batch in (1, 7, 256):  # the batch dimension is dynamic
        random = (real.mean(0) + spread * rng.standard_normal((batch, *shape))).astype(np.float32)
        assert_parity(model, path, random)
    figures = assert_parity(model, path, real)
    print(f"parity {model.spec['model_type']} {model.env_name}: {figures}")


def test_image_cnn_folds_in_the_pixel_scaling(tmp_path):
    model = image_model()
    assert model.spec["obs_scale"] == pytest.approx(1 / 255)
    path = export_onnx(model, tmp_path / "images.onnx", with_details=True)
    pixels = np.random.default_rng(1).integers(0, 256, (9, 64, 64, 3)).astype(np.float32)
    assert_parity(model, path, pixels)


def test_plain_export_outputs_only_actions_and_describes_itself(tmp_path):
    model = image_model()
    path = export_onnx(model, tmp_path / "plain.onnx")
    session = onnx_session(path)
    assert [output.name for output in session.get_outputs()] == ["action"]
    assert session.get_inputs()[0].shape[0] == "batch"
    metadata = session.get_modelmeta().custom_metadata_map
    assert json.loads(metadata["obs_shape"]) == [64, 64, 3]
    assert json.loads(metadata["action_space"]) == {"kind": "discrete", "n": 5}
    assert metadata["env_name"] == "images" and metadata["global_step"] == "7"
    # Exporting leaves the caller's model as it was (on its device, same weights).
    assert next(model.policy.parameters()).device.type == "cpu"


def test_export_refuses_a_wrong_file_name_and_a_missing_model(tmp_path):
    with pytest.raises(ExportError, match=r"must end in \.onnx"):
        export_onnx(image_model(), tmp_path / "agent.bin")
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(ExportError, match="no final model"):
        export_onnx(tmp_path / "empty_run", tmp_path / "x.onnx")


def test_cli_export_writes_the_file_and_reports_errors(tmp_path):
    result = train(config_from_dict({**TINY, "env_name": "cartpole"}), tmp_path / "run")
    out = tmp_path / "cli.onnx"
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "export", str(result.final_model), "--onnx", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert out.is_file() and "raw observations -> action" in done.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "trainer", "export", str(tmp_path / "nope.pth"), "--onnx", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and "no such file or run folder" in missing.stderr


PLAY_WITHOUT_TORCH = textwrap.dedent("""
    import json, sys
    import gymnasium, numpy as np, onnxruntime
    session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    env = gymnasium.make("CartPole-v1")
    returns = []
    for episode in range(int(sys.argv[2])):
        obs, _ = env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            action = session.run(["action"], {"obs": obs[None].astype(np.float32)})[0][0]
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += reward
            done = terminated or truncated
        returns.append(total)
    print(json.dumps({"returns": returns, "torch_imported": "torch" in sys.modules}))
""")


@pytest.fixture(scope="module")
def cartpole_475(tmp_path_factory):
    """The shipped CartPole config trained in full (about 30 s on two cores)."""
    config = load_config(ROOT / "configs" / "cartpole.yaml", ["device=cpu", "gif_interval=0", "checkpoint.interval=0"])
    return train(config, tmp_path_factory.mktemp("cartpole") / "run").final_model


def test_onnx_model_plays_gymnasium_cartpole_without_torch(cartpole_475, tmp_path):
    path = export_onnx(cartpole_475, tmp_path / "cartpole.onnx")
    done = subprocess.run(
        [sys.executable, "-c", PLAY_WITHOUT_TORCH, str(path), "20"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["torch_imported"] is False
    assert np.mean(report["returns"]) >= 475, report["returns"]


@pytest.mark.parametrize("env_kwargs", [{}, {"obs": "lookahead", "hard_pipes": 0.5}], ids=["8 floats", "lookahead"])
def test_the_flappy_bird_example_plays_from_the_onnx_file(tmp_path, env_kwargs):
    # The example builds the model's own game from the file's metadata: a 12-float model plays too.
    result = train(config_from_dict({**TINY, "env_name": "flappy_bird", "env_kwargs": env_kwargs}), tmp_path / "run")
    path = export_onnx(result.final_model, tmp_path / "flappy.onnx")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "play_flappy_onnx.py"), str(path), "--episodes", "2", "--no-window"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SDL_VIDEODRIVER": "dummy"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("score") == 2 and "episode 2" in done.stdout


# -- the output path: never replaced unasked, never written through a link; the real env recorded ----


@pytest.fixture(scope="module")
def snake_run(tmp_path_factory):
    """A snake model on an 8x8 grid (features: 18 numbers), trained for 3 updates."""
    run_dir = tmp_path_factory.mktemp("snake") / "run"
    train(config_from_dict({**TINY, "env_name": "snake", "env_kwargs": {"grid_size": 8}}), run_dir)
    return run_dir


def export_cli(capsys, *args: str) -> tuple[int, str]:
    from trainer.__main__ import main

    code = main(["export", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_cli_export_refuses_an_existing_file_without_force_and_replaces_it_atomically_with(snake_run, tmp_path, capsys):
    out = tmp_path / "agent.onnx"
    out.write_bytes(b"my earlier export")
    keep = tmp_path / "hard-link-to-the-earlier-file"
    os.link(out, keep)
    code, text = export_cli(capsys, snake_run, "--onnx", out)
    assert code == 2
    assert text.strip() == (
        f"error: --onnx {out}: there is a file at this path already; pass --force to replace it, or choose another name"
    )
    assert out.read_bytes() == b"my earlier export"

    code, text = export_cli(capsys, snake_run, "--onnx", out, "--force")
    assert code == 0, text
    assert keep.read_bytes() == b"my earlier export"  # a new file took the name: nothing was written in place
    assert onnx_session(out).get_modelmeta().custom_metadata_map["env_name"] == "snake"
    assert sorted(item.name for item in tmp_path.iterdir()) == ["agent.onnx", keep.name]  # no temporary left


@pytest.mark.parametrize("dangling", [False, True], ids=["link-to-a-file", "dangling-link"])
def test_cli_export_never_writes_through_a_symbolic_link(snake_run, tmp_path, capsys, dangling):
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    if not dangling:
        target.write_text("not yours to overwrite")
    link = tmp_path / "agent.onnx"
    link.symlink_to(target)
    code, text = export_cli(capsys, snake_run, "--onnx", link)
    assert code == 2 and f"--onnx {link}: there is a symbolic link" in text and "--force" in text
    assert link.is_symlink()

    code, text = export_cli(capsys, snake_run, "--onnx", link, "--force")
    assert code == 0, text
    assert not link.is_symlink() and link.is_file()  # the link itself was replaced ...
    assert (
        (target.read_text() == "not yours to overwrite") if not dangling else not target.exists()
    )  # ... not its target
    onnx_session(link)


def test_export_refuses_a_folder_as_the_output(snake_run, tmp_path):
    folder = tmp_path / "out.onnx"
    folder.mkdir()
    with pytest.raises(ExportError, match="is a folder"):
        export_onnx(snake_run, folder)


def test_metadata_names_the_env_the_model_was_trained_on_with_its_options(snake_run, tmp_path, capsys):
    code, text = export_cli(capsys, snake_run, "--onnx", tmp_path / "snake.onnx")
    assert code == 0 and "env snake" in text, text
    metadata = onnx_session(tmp_path / "snake.onnx").get_modelmeta().custom_metadata_map
    saved = load_model(snake_run / "snake_ppo_final.pth").config
    assert metadata["env_name"] == saved["env_name"] == "snake"
    assert json.loads(metadata["env_kwargs"]) == saved["env_kwargs"] == {"grid_size": 8}
    assert json.loads(metadata["obs_shape"]) == [18]
