"""Checkpoints and models: round trip, resume equivalence, kill -9 during a save, unsafe files,
stopping, GIFs and load_model().predict()."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.config.defaults import load_config
from trainer.config.validation import config_from_dict
from trainer.run.checkpoint import CheckpointError, latest_checkpoint, load_model, read_checkpoint
from trainer.run.events import read_events
from trainer.run.layout import list_checkpoints
from trainer.run.loop import ResumeError, train

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


EVERY_UPDATE = 1e-9  # gif_interval (seconds) shorter than any update: a GIF after each one


def tiny_config(**overrides):
    raw = {
        "env_name": "cartpole",
        "num_envs": 16,
        "num_steps": 16,
        "mini_batch_size": 64,
        "update_epochs": 2,
        "learning_rate": 1e-3,
        "total_timesteps": 16 * 16 * 6,
        "gif_interval": 0,
        "seed": 3,
        "device": "cpu",
        "checkpoint": {"interval": 2, "keep": 2},
    }
    raw.update(overrides)
    return config_from_dict(raw)


class UpdateCounter:
    def __init__(self):
        self.updates = 0
        self.events = []

    def __call__(self, event):
        self.events.append(event)
        if event["type"] == "metrics":
            self.updates += 1


def test_final_model_round_trip(tmp_path, test_device):
    result = train(tiny_config(device=test_device), tmp_path / "run")
    assert result.status == "finished"
    assert result.final_model == tmp_path / "run" / "cartpole_ppo_final.pth"
    # A plain dict that torch opens with weights_only=True.
    payload = torch.load(result.final_model, weights_only=True)
    assert payload["kind"] == "model" and payload["global_step"] == result.step
    assert payload["config"]["env_name"] == "cartpole"
    model = load_model(result.final_model)
    obs = torch.randn(32, 4)
    with torch.no_grad():
        expected = result.policy.act(obs.to(result.policy.actor[0].weight.device), deterministic=True)[0].cpu().numpy()
    actions, state = model.predict(obs.numpy(), deterministic=True)
    assert state is None
    np.testing.assert_array_equal(actions, expected)


def test_predict_accepts_one_observation_or_a_batch(tmp_path, test_device):
    result = train(tiny_config(total_timesteps=256, checkpoint={"interval": 0}), tmp_path / "run")
    model = load_model(result.final_model, device=test_device)
    single, _ = model.predict(np.zeros(4, dtype=np.float32))
    with torch.no_grad():
        logits = result.policy.actor(torch.zeros(1, 4, device=next(result.policy.parameters()).device))
    assert np.ndim(single) == 0 and int(single) == int(logits.argmax())
    batch, _ = model.predict(np.zeros((5, 4)))
    assert batch.shape == (5,) and batch.dtype == np.int64
    from_list, _ = model.predict([0.0, 0.1, 0.0, -0.1])
    assert np.ndim(from_list) == 0
    tensor_batch, _ = model.predict(torch.zeros(3, 4))
    assert isinstance(tensor_batch, np.ndarray) and tensor_batch.shape == (3,)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        model.predict(np.zeros(5))
    # A checkpoint loads for acting too.
    checkpoint_model = load_model(list_checkpoints(tmp_path / "run" / "checkpoints")[-1][1])  # the last: final weights
    probe = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_array_equal(checkpoint_model.predict(probe)[0], model.predict(probe)[0])


def test_trained_model_balances_gymnasiums_own_cartpole(tmp_path):
    """Trained on the native batched CartPole, the saved .pth plays Gymnasium's CartPole-v1."""
    import gymnasium

    config = load_config(ROOT / "configs" / "cartpole.yaml", ["gif_interval=0", "checkpoint.interval=0", "device=cpu"])
    solved = lambda: recent_return[0] >= 475  # noqa: E731
    recent_return = [0.0]

    def watch(event):
        if event["type"] == "metrics" and event["recent_return_mean"] is not None:
            recent_return[0] = event["recent_return_mean"]

    result = train(config, tmp_path / "run", sinks=[watch], should_stop=solved)
    model = load_model(result.final_model)
    env = gymnasium.make("CartPole-v1")
    lengths = []
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for length in range(1, 501):
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, _ = env.step(int(action))
            if terminated or truncated:
                break
        lengths.append(length)
    assert min(lengths) >= 400, f"episode lengths in Gymnasium's CartPole-v1: {lengths} (random play: about 22)"


def test_checkpoints_are_written_and_only_the_last_k_kept(tmp_path):
    counter = UpdateCounter()
    train(tiny_config(), tmp_path / "run", sinks=[counter])
    steps = [step for step, _ in list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert steps == [16 * 16 * 4, 16 * 16 * 6]  # interval 2 of 6 updates, keep 2
    announced = [event["step"] for event in counter.events if event["type"] == "checkpoint"]
    assert announced == [16 * 16 * 2, 16 * 16 * 4, 16 * 16 * 6]
    payload = read_checkpoint(tmp_path / "run" / "checkpoints" / f"ckpt_{16 * 16 * 6}.pth")
    for key in ("algo", "algorithm_state", "rng", "env_state", "next_obs", "policy_state", "config", "global_step"):
        assert key in payload
    assert payload["format_version"] == 2 and payload["algo"] == "ppo"
    assert set(payload["algorithm_state"]) == {"optimizer", "reward_scaler"}  # PPO's own state


def test_a_format_1_checkpoint_still_resumes_exactly(tmp_path):
    """Format 1 kept PPO's optimiser and reward scaler at the top level of a checkpoint; a run
    saved so resumes as exactly as one saved today."""
    from trainer.run.checkpoint import atomic_save

    config = tiny_config(norm_reward=True)
    straight = train(config, tmp_path / "straight")
    counter = UpdateCounter()
    train(config, tmp_path / "old", sinks=[counter], should_stop=lambda: counter.updates >= 3)
    path, payload = latest_checkpoint(tmp_path / "old" / "checkpoints")
    state = payload.pop("algorithm_state")
    payload.update(format_version=1, optimizer_state=state["optimizer"], reward_scaler=state["reward_scaler"])
    atomic_save(payload, path)
    resumed = train(config, tmp_path / "old", resume=True)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), name


def test_a_newer_format_and_another_algorithm_are_refused_by_name(tmp_path):
    from trainer.run.checkpoint import atomic_save

    counter = UpdateCounter()
    train(tiny_config(), tmp_path / "run", sinks=[counter], should_stop=lambda: counter.updates >= 1)
    path, payload = latest_checkpoint(tmp_path / "run" / "checkpoints")
    with pytest.raises(ResumeError, match="trained with algo 'ppo', but this config trains 'a2c'"):
        train(tiny_config(algo="a2c", update_epochs=1), tmp_path / "run", resume=True)
    atomic_save({**payload, "format_version": 3}, path)
    with pytest.raises(CheckpointError, match="newer RL Studio \\(format version 3\\)"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    "options",
    [{}, {"norm_obs": True, "norm_reward": True, "clip_vloss": True, "use_per": True, "target_kl": 0.5}],
    ids=["default", "all-options"],
)
def test_stopped_and_resumed_run_equals_straight_run(tmp_path, options):
    config = tiny_config(**options)
    straight = train(config, tmp_path / "straight")

    counter = UpdateCounter()
    stopped = train(config, tmp_path / "resumed", sinks=[counter], should_stop=lambda: counter.updates >= 3)
    assert stopped.status == "stopped" and stopped.step == 16 * 16 * 3
    resumed = train(config, tmp_path / "resumed", resume=True)
    assert resumed.status == "finished" and resumed.step == straight.step

    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), name
    # The curves continue: every update's step appears once, in order.
    steps = [
        event["step"] for event in read_events(tmp_path / "resumed" / "metrics.jsonl") if event["type"] == "metrics"
    ]
    assert steps == [16 * 16 * n for n in range(1, 7)]
    starts = [event for event in read_events(tmp_path / "resumed" / "metrics.jsonl") if event["type"] == "start"]
    assert [event["resumed_from_step"] for event in starts] == [None, 16 * 16 * 3]


def test_resume_drops_metrics_written_after_the_checkpoint(tmp_path):
    config = tiny_config(checkpoint={"interval": 2, "keep": 3})
    train(config, tmp_path / "run")
    # Pretend the process died after update 5: only checkpoints up to step 4 x 256 survive.
    (tmp_path / "run" / "checkpoints" / f"ckpt_{256 * 6}.pth").unlink()
    (tmp_path / "run" / "cartpole_ppo_final.pth").unlink()
    train(config, tmp_path / "run", resume=True)
    steps = [event["step"] for event in read_events(tmp_path / "run" / "metrics.jsonl") if event["type"] == "metrics"]
    assert steps == [256 * n for n in range(1, 7)]


def test_resume_without_checkpoint_trains_from_step_zero_and_says_so(tmp_path):
    # A run that died before its first checkpoint is restarted in place (issue 10, item 11).
    result = train(tiny_config(), tmp_path / "empty", resume=True)
    events = read_events(tmp_path / "empty" / "metrics.jsonl")
    assert result.status == "finished"
    assert [event["step"] for event in events if event["type"] == "metrics"][0] == 256
    assert any("no checkpoint to resume from" in event.get("message", "") for event in events)


def test_stop_signal_saves_checkpoint_and_final_model(tmp_path):
    counter = UpdateCounter()
    result = train(
        tiny_config(checkpoint={"interval": 0}),
        tmp_path / "run",
        sinks=[counter],
        should_stop=lambda: counter.updates >= 2,
    )
    assert result.status == "stopped" and result.step == 512
    assert [step for step, _ in list_checkpoints(tmp_path / "run" / "checkpoints")] == [512]
    assert load_model(result.final_model).global_step == 512
    end = counter.events[-1]
    assert end["type"] == "end" and end["status"] == "stopped" and end["final_model"] == str(result.final_model)


def test_rollout_gif_is_written_and_announced(tmp_path):
    from PIL import Image

    counter = UpdateCounter()
    train(
        tiny_config(gif_interval=EVERY_UPDATE, gif_time_fraction=1.0, gif_max_frames=40),
        tmp_path / "run",
        sinks=[counter],
    )
    gifs = [event for event in counter.events if event["type"] == "gif"]
    assert gifs, "no gif event"
    for event in gifs:
        path = Path(event["path"])
        assert path.parent == tmp_path / "run" / "rollouts" and path.name == f"step_{event['step']}.gif"
        assert 1 <= event["frames"] <= 40
        # CartPole draws every 2nd step; a longer episode is played on to its end (it is short here).
        assert event["steps_shown"] <= min(2 * event["frames"], event["episode_steps"]) and event["episode_ended"]
        with Image.open(path) as image:
            assert image.format == "GIF"
            # PIL merges identical consecutive frames, adding up their durations.
            durations = []
            for index in range(image.n_frames):
                image.seek(index)
                durations.append(image.info["duration"])
        assert sum(durations) == event["frames"] * min(durations)
        assert event["episode_return"] > 0


def test_gifs_do_not_change_what_is_learned(tmp_path):
    plain = train(tiny_config(total_timesteps=1024), tmp_path / "plain")
    counter = UpdateCounter()
    with_gifs = train(
        tiny_config(total_timesteps=1024, gif_interval=EVERY_UPDATE, gif_time_fraction=1.0, gif_max_frames=20),
        tmp_path / "gifs",
        sinks=[counter],
    )
    assert sum(event["type"] == "gif" for event in counter.events) == 5  # after each of 4 updates + the final one
    for name, tensor in plain.policy.state_dict().items():
        assert torch.equal(tensor, with_gifs.policy.state_dict()[name]), name


# -- unsafe and damaged files -----------------------------------------------------------------


class Exploit:
    """Unpickling this runs a shell command (what a malicious .pth would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_malicious_pth_is_refused_and_nothing_runs(tmp_path, zip_format):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pth"
    torch.save(
        {"format": "rl-studio", "format_version": 1, "policy_state": Exploit(marker)},
        path,
        _use_new_zipfile_serialization=zip_format,
    )
    with pytest.raises(CheckpointError) as info:
        load_model(path)
    assert "refused" in str(info.value) and "Nothing from it was executed" in str(info.value)
    assert not marker.exists()

    completed = subprocess.run(
        [sys.executable, "-m", "trainer", "evaluate", str(path), "--episodes", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2 and "refused" in completed.stderr
    assert not marker.exists()


def test_foreign_and_damaged_files_get_clear_errors(tmp_path):
    plain = tmp_path / "state_dict.pth"
    torch.save({"weight": torch.zeros(2)}, plain)
    with pytest.raises(CheckpointError, match="not an RL Studio model"):
        load_model(plain)
    damaged = tmp_path / "damaged.pth"
    damaged.write_bytes(b"not a torch file at all")
    with pytest.raises(CheckpointError, match="not a readable PyTorch file"):
        load_model(damaged)
    with pytest.raises(CheckpointError, match="no such file"):
        load_model(tmp_path / "missing.pth")


KILL_DURING_SAVE = """
import sys, torch
from pathlib import Path
from trainer.run.checkpoint import atomic_save
folder = Path(sys.argv[1])
atomic_save({"format": "rl-studio", "format_version": 1, "kind": "checkpoint", "global_step": 1,
             "weights": torch.arange(10.0)}, folder / "ckpt_1.pth")
print("first saved", flush=True)
atomic_save({"format": "rl-studio", "format_version": 1, "kind": "checkpoint", "global_step": 2,
             "weights": torch.ones(150_000_000)}, folder / "ckpt_2.pth")
print("second saved", flush=True)
"""


def test_sigkill_during_a_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", KILL_DURING_SAVE, str(folder)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert process.stdout.readline().strip() == "first saved"
        deadline = time.monotonic() + 60
        while not any(path.name.endswith(".tmp") and path.stat().st_size > 0 for path in folder.iterdir()):
            assert time.monotonic() < deadline, "the second save never started"
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)  # mid-write of the 600 MB second checkpoint
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert not (folder / "ckpt_2.pth").exists(), "the save finished before the kill; the test proves nothing"
    path, payload = latest_checkpoint(folder)
    assert path == folder / "ckpt_1.pth" and payload["global_step"] == 1
    assert torch.equal(payload["weights"], torch.arange(10.0))


def test_latest_checkpoint_skips_a_damaged_newest_file(tmp_path):
    result = train(tiny_config(checkpoint={"interval": 2, "keep": 3}), tmp_path / "run")
    folder = tmp_path / "run" / "checkpoints"
    newest = list_checkpoints(folder)[-1][1]
    newest.write_bytes(newest.read_bytes()[:100])  # torn file
    path, payload = latest_checkpoint(folder)
    assert path != newest and payload["global_step"] < result.step


def test_the_studio_reads_a_cli_run_as_the_trainer_ran_it(tmp_path):
    """The events a real run writes are the ones the studio folds into its view: curves, GIF,
    checkpoint, final model and status all match what the trainer did."""
    from studio.history import RunFollower

    counter = UpdateCounter()
    result = train(
        tiny_config(gif_interval=EVERY_UPDATE, gif_time_fraction=1.0, gif_max_frames=10),
        tmp_path / "run",
        sinks=[counter],
    )
    events = read_events(tmp_path / "run" / "metrics.jsonl")
    assert [event["type"] for event in events][:: len(events) - 1] == ["start", "end"]
    assert events == json.loads(json.dumps(counter.events))  # the file holds every event, as plain JSON
    run = RunFollower("run", tmp_path / "run").refresh(owner_alive=False).snapshot()
    assert run.status == "finished" and run.step == result.step == 1536
    assert [m["step"] for m in run.metrics] == [256 * i for i in range(1, 7)]
    assert run.final_model == str(result.final_model) and Path(run.final_model).is_absolute()
    assert run.latest_checkpoint == str(list_checkpoints(tmp_path / "run" / "checkpoints")[-1][1])
    assert run.gif_count == 7 and Path(run.latest_gif.path).is_file() and run.latest_gif.step == 1536  # 1-6, end
    assert run.latest_gif.episode_ended and run.latest_gif.episode_steps >= run.latest_gif.steps_shown > 0
    assert run.device == "cpu" and run.config["mini_batch_size"] == 64 and run.error_message is None
    config_text = (tmp_path / "run" / "config.yaml").read_text()
    assert "total_timesteps: 1536" in config_text and "mini_batch_size: 64" in config_text
    log = (tmp_path / "run" / "train.log").read_text()
    assert "[STEP 1536] EpLenMean:" in log and "EpRewMean:" in log and "FPS:" in log
    assert not (tmp_path / "run" / "owner.json").exists()  # released when the run ended


def test_gif_time_budget_cuts_scheduled_gifs_shorter_never_later(tmp_path):
    from trainer.run.gif import MIN_GIF_FRAMES

    counter = UpdateCounter()
    train(
        tiny_config(gif_interval=EVERY_UPDATE, gif_time_fraction=0.05, gif_max_frames=300),
        tmp_path / "run",
        sinks=[counter],
    )
    gifs = [event for event in counter.events if event["type"] == "gif"]
    # One after each update (the picture never falls behind), then the final one after training;
    # seconds of training cannot pay for whole GIFs at 5%, so those between are cut to the floor.
    assert [event["step"] for event in gifs] == [16 * 16 * update for update in range(1, 7)] + [16 * 16 * 6]
    assert all(event["frames"] <= MIN_GIF_FRAMES for event in gifs[1:-1])


def test_a_run_directory_is_not_trained_into_twice(tmp_path):
    train(tiny_config(total_timesteps=256), tmp_path / "run")
    with pytest.raises(ResumeError, match="already holds a run"):
        train(tiny_config(total_timesteps=256), tmp_path / "run")


@pytest.mark.parametrize("env_name", ["flappy_bird", "snake"])
def test_resume_is_exact_for_the_built_in_games(tmp_path, env_name):
    config = tiny_config(env_name=env_name, total_timesteps=16 * 16 * 4)
    straight = train(config, tmp_path / "straight")
    counter = UpdateCounter()
    train(config, tmp_path / "resumed", sinks=[counter], should_stop=lambda: counter.updates >= 2)
    resumed = train(config, tmp_path / "resumed", resume=True)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), name
