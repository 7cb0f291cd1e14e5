"""The trainer side of issue 10 (hardening): a .pth or a run folder never decides what code runs,
a .pth is bounded before anything is allocated, a full disk stops the run with a clear message and
loses nothing before the last checkpoint, a run that cannot work is refused before its folder
exists, and bad CLI input gets one line instead of a traceback."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.nets.build import build_policy
from trainer.nets.spec import make_policy_spec
from trainer.run.checkpoint import CheckpointError, latest_checkpoint, load_model, read_checkpoint
from trainer.run.loop import train
from trainer.serving.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "SDL_VIDEODRIVER": "dummy"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ENV
    )


def model_file(path: Path, config: dict, obs_shape=(4,), state=None, spec_obs_shape=None) -> Path:
    """An RL Studio model .pth for a CartPole-shaped network with `config` as its saved config."""
    spec = make_policy_spec("ppo-small", gym.spaces.Box(-1, 1, obs_shape), gym.spaces.Discrete(2))
    weights = build_policy(spec).state_dict() if state is None else state
    if spec_obs_shape is not None:
        spec["obs_shape"] = list(spec_obs_shape)
    torch.save(
        {
            "format": "rl-studio",
            "format_version": 1,
            "kind": "model",
            "policy_spec": spec,
            "policy_state": weights,
            "config": config,
            "global_step": 0,
            "update": 0,
        },
        path,
    )
    return path


def shell_config(marker: Path) -> dict:
    return {"env_name": "os:system", "env_kwargs": {"command": f"touch {marker}"}}


# -- 1. nothing in a file decides what code runs -------------------------------------------------


def test_evaluate_cli_refuses_an_entry_point_saved_in_the_model(tmp_path):
    marker = tmp_path / "pwned"
    path = model_file(tmp_path / "model.pth", shell_config(marker))
    completed = cli("evaluate", str(path), "--episodes", "1")
    assert completed.returncode == 2, completed.stderr
    assert "'os:system'" in completed.stderr and "--allow-custom-envs" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not marker.exists()


def test_evaluate_library_refuses_saved_code_and_plays_the_env_the_user_names(tmp_path):
    marker = tmp_path / "pwned"
    path = model_file(tmp_path / "model.pth", {**shell_config(marker), "wrappers": []})
    with pytest.raises(ConfigError, match=r"'os:system'.*allow_custom_code=True"):
        evaluate(path, episodes=1)
    assert not marker.exists()
    # The user names the env: the saved name and its options are not used at all.
    result = evaluate(path, episodes=2, env_name="cartpole")
    assert result.episodes == 2 and not marker.exists()


def test_evaluate_refuses_saved_wrappers_even_with_a_named_env(tmp_path):
    path = model_file(tmp_path / "model.pth", {"env_name": "cartpole", "wrappers": ["os:system"]})
    with pytest.raises(ConfigError, match="'os:system'"):
        evaluate(path, episodes=1, env_name="cartpole")


def test_evaluate_says_when_the_saved_env_is_unknown(tmp_path):
    path = model_file(tmp_path / "model.pth", {"env_name": "NoSuchGame-v9"})
    completed = cli("evaluate", str(path), "--episodes", "1")
    assert completed.returncode == 2 and "NoSuchGame-v9" in completed.stderr and "--env" in completed.stderr


def test_resume_refuses_an_entry_point_in_the_run_folders_config(tmp_path):
    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(f"env_name: 'os:system'\nenv_kwargs:\n  command: 'touch {marker}'\n")
    completed = cli("--resume", str(run))
    assert completed.returncode == 2, completed.stderr
    assert "'os:system'" in completed.stderr and "--allow-custom-envs" in completed.stderr
    assert not marker.exists() and sorted(path.name for path in run.iterdir()) == ["config.yaml"]


# -- 2. a .pth is bounded before anything is allocated -------------------------------------------


BIG_SPEC_IN_A_SMALL_FILE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))  # a 10 GB network cannot even be tried
from trainer.run.checkpoint import CheckpointError, load_model
try:
    load_model(sys.argv[1])
except CheckpointError as error:
    print("refused:", error)
"""


def test_a_small_pth_describing_a_huge_network_is_refused_without_allocating(tmp_path):
    path = model_file(tmp_path / "huge.pth", {"env_name": "cartpole"}, spec_obs_shape=[40_000_000])
    assert path.stat().st_size < 100_000
    completed = subprocess.run(
        [sys.executable, "-c", BIG_SPEC_IN_A_SMALL_FILE, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert completed.returncode == 0, completed.stderr
    assert "refused:" in completed.stdout and "parameters" in completed.stdout


def test_weights_that_do_not_fit_their_spec_name_the_tensor_and_both_shapes(tmp_path):
    spec = make_policy_spec("ppo-small", gym.spaces.Box(-1, 1, (6,)), gym.spaces.Discrete(2))
    wrong = build_policy(spec).state_dict()
    path = model_file(tmp_path / "mismatch.pth", {"env_name": "cartpole"}, state=wrong)
    with pytest.raises(CheckpointError) as info:
        load_model(path)
    message = str(info.value)
    assert "(64, 6)" in message and "(64, 4)" in message and "weight" in message


def test_a_zip_bomb_pth_is_refused_before_it_is_inflated(tmp_path):
    path = tmp_path / "bomb.pth"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        with archive.open("archive/data/0", "w", force_zip64=True) as member:
            chunk = bytes(2**24)
            for _ in range(16):  # 256 MiB of zeros in about 250 KB: a 1000x bomb
                member.write(chunk)
    assert path.stat().st_size < 2**20
    with pytest.raises(CheckpointError, match="would inflate"):
        read_checkpoint(path)


def test_a_real_checkpoint_passes_the_bounds(tmp_path):
    """The bounds refuse no honest file: a model loads with exactly the weights it was saved with,
    and plays as the saved network does (its greedy actions, both of them, on 256 observations)."""
    spec = make_policy_spec("ppo-small", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    torch.manual_seed(0)
    saved = build_policy(spec)
    with torch.no_grad():
        for parameter in saved.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # far from any fresh init
    path = model_file(tmp_path / "model.pth", {"env_name": "cartpole"}, state=saved.state_dict())
    model = load_model(path)
    loaded = model.policy.state_dict()
    assert loaded.keys() == saved.state_dict().keys()
    for name, tensor in saved.state_dict().items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0, msg=name)
    obs = torch.randn(256, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = saved.actor(obs).argmax(-1).numpy()
    actions, _ = model.predict(obs.numpy())
    np.testing.assert_array_equal(actions, expected)
    assert set(expected.tolist()) == {0, 1}, "a network that plays one action would prove nothing"
    assert model.predict(obs[7].numpy())[0] == expected[7]


# -- 3. disk full is an error, not a warning -----------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 2 MB tmpfs here (needs root): {mounted.stderr.strip()[:200]}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_stops_the_run_and_keeps_the_last_checkpoint_and_history(tiny_disk):
    run = tiny_disk / "run"
    config = config_from_dict(
        {
            "env_name": "cartpole",
            "num_envs": 4,
            "num_steps": 8,
            "mini_batch_size": 32,
            "update_epochs": 1,
            "total_timesteps": 32 * 5000,
            "gif_interval": 0,
            "seed": 1,
            "device": "cpu",
            "checkpoint": {"interval": 1, "keep": 1000},
        }
    )
    events = []
    with pytest.raises(OSError, match="no space left on " + str(tiny_disk)):
        train(config, run, sinks=[events.append])
    assert [event["type"] for event in events[-2:]] == ["error", "end"]
    assert "no space left on" in events[-2]["message"] and events[-1]["status"] == "failed"

    found = latest_checkpoint(run / "checkpoints")
    assert found is not None
    checkpoint_path, payload = found
    load_model(checkpoint_path)
    text = (run / "metrics.jsonl").read_text()
    assert text.endswith("\n")  # no half line
    lines = [json.loads(line) for line in text.splitlines()]
    metrics_steps = [line["step"] for line in lines if line["type"] == "metrics"]
    assert metrics_steps and metrics_steps[-1] >= payload["global_step"]
    assert metrics_steps == sorted(set(metrics_steps))


# -- 4. preflight: a run that cannot work is refused before its folder exists ---------------------


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"num_envs": 1_048_576, "num_steps": 100_000}, ["GiB", "num_envs"]),
        ({"env_name": "snake", "env_kwargs": {"grid_size": -3}}, ["grid_size"]),
        ({"env_name": "snake", "env_kwargs": {"grid_sise": 10}}, ["grid_sise", "grid_size"]),
    ],
    ids=["memory", "bad-value", "unknown-key"],
)
def test_train_refuses_before_any_folder_exists(tmp_path, settings, words):
    with pytest.raises(ConfigError) as info:
        train({"env_name": "cartpole", "device": "cpu", **settings}, tmp_path / "run")
    assert all(word in str(info.value) for word in words)
    assert not (tmp_path / "run").exists()


# -- 5. CLI: one line, exit 2, no traceback -------------------------------------------------------


def one_line_error(completed: subprocess.CompletedProcess, *words: str) -> None:
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr
    error_lines = [line for line in completed.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, completed.stderr
    assert all(word in error_lines[0] for word in words), completed.stderr


def test_cli_bad_yaml_files_get_one_line(tmp_path):
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("env_name: caf\xe9\n".encode("latin-1"))
    one_line_error(cli("--config", str(latin), "--runs-dir", str(tmp_path / "runs")), "latin1.yaml")
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    one_line_error(cli("--config", str(deep), "--runs-dir", str(tmp_path / "runs")), "deep.yaml")
    assert not (tmp_path / "runs").exists()


def test_cli_runs_dir_that_is_a_file_or_read_only(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    one_line_error(cli("--set", "env_name=cartpole", "--runs-dir", str(a_file)), "--runs-dir", "is a file")
    one_line_error(cli("--set", "env_name=cartpole", "--runs-dir", str(a_file / "runs")), "is a file")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(read_only)], capture_output=True
        ).returncode
        != 0
    ):
        if os.geteuid() == 0:
            pytest.skip("cannot mount a read-only tmpfs, and root may write anywhere else")
        read_only.chmod(0o500)
    try:
        one_line_error(cli("--set", "env_name=cartpole", "--runs-dir", str(read_only / "runs")), "not writable")
    finally:
        subprocess.run(["umount", "-l", str(read_only)], capture_output=True)


def test_cli_resume_of_a_missing_folder(tmp_path):
    one_line_error(cli("--resume", str(tmp_path / "nowhere")), "no such run directory")


def test_predict_with_the_wrong_observation_shape_says_what_it_expects(tmp_path):
    model = load_model(model_file(tmp_path / "model.pth", {"env_name": "cartpole"}))
    with pytest.raises(ValueError) as info:
        model.predict(np.zeros(3, dtype=np.float32))
    assert str(info.value) == "expected observations of shape (4,) (or a batch (N, 4)), got (3,)"
    with pytest.raises(ValueError, match=r"got \(2, 3\)"):
        model.predict(np.zeros((2, 3), dtype=np.float32))
    assert model.predict(np.zeros((5, 4), dtype=np.float32))[0].shape == (5,)


def test_a_checkpoint_save_on_a_full_disk_says_no_space_and_keeps_the_old_file(tiny_disk):
    from trainer.run.checkpoint import atomic_save

    path = tiny_disk / "ckpt.pth"
    atomic_save({"format": "rl-studio", "weights": torch.zeros(1000)}, path)
    # 3 MB of weights cannot fit on a 2 MB disk: torch says "unexpected pos", the user reads this.
    with pytest.raises(OSError, match=f"no space left on {path}"):
        atomic_save({"format": "rl-studio", "weights": torch.zeros(750_000)}, path)
    assert torch.load(path, weights_only=True)["weights"].shape == (1000,)
    assert [item.name for item in tiny_disk.iterdir()] == ["ckpt.pth"]  # no temporary left behind
