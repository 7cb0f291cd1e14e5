"""The command line: train from YAML, --set, --resume, evaluate, and errors with exit code 2."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--set",
    "num_envs=8",
    "--set",
    "num_steps=16",
    "--set",
    "mini_batch_size=32",
    "--set",
    "gif_interval=0",
    "--set",
    "update_epochs=1",
    "--set",
    "device=cpu",
]


def run_cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SDL_VIDEODRIVER": "dummy"}
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def only_run_dir(runs_dir: Path) -> Path:
    (run_dir,) = list(runs_dir.iterdir())
    return run_dir


def test_train_from_yaml_with_overrides_then_resume_and_evaluate(tmp_path):
    completed = run_cli(
        "--config", "configs/cartpole.yaml", *TINY, "--set", "total_timesteps=384", "--runs-dir", str(tmp_path)
    )
    assert completed.returncode == 0, completed.stderr
    run_dir = only_run_dir(tmp_path)
    assert run_dir.name.startswith("cartpole-ppo-small-")
    # Piped output: log lines, no progress bar.
    assert "[STEP 384] EpLenMean:" in completed.stdout and "\r" not in completed.stdout
    assert (run_dir / "cartpole_ppo_final.pth").is_file() and (run_dir / "config.yaml").is_file()

    resumed = run_cli("--resume", str(run_dir), "--set", "total_timesteps=640")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "[STEP 640]" in resumed.stdout

    gif = tmp_path / "play.gif"
    evaluated = run_cli("evaluate", str(run_dir / "cartpole_ppo_final.pth"), "--episodes", "5", "--gif", str(gif))
    assert evaluated.returncode == 0, evaluated.stderr
    assert "episodes: 5" in evaluated.stdout and "return:" in evaluated.stdout and "+/-" in evaluated.stdout
    assert "score:" in evaluated.stdout and gif.stat().st_size > 0


def test_config_errors_exit_2_with_the_message(tmp_path):
    completed = run_cli("--set", "model_type=qwen-7b", "--runs-dir", str(tmp_path))
    assert completed.returncode == 2
    assert "language models are not policies" in completed.stderr
    assert not list(tmp_path.iterdir()), "no run directory for a config that fails validation"

    bad = tmp_path / "bad.yaml"
    bad.write_text("num_envz: 8\n")
    completed = run_cli("--config", str(bad), "--runs-dir", str(tmp_path / "runs"))
    assert completed.returncode == 2 and "Did you mean 'num_envs'?" in completed.stderr


def test_no_arguments_prints_usage():
    completed = run_cli()
    assert completed.returncode == 2 and "--config" in completed.stderr


def test_help_lists_every_command():
    completed = run_cli("--help")
    assert completed.returncode == 0
    for command in ("evaluate", "export", "serve", "master", "worker"):
        assert f"python -m trainer {command}" in completed.stdout, command
    benchmark_help = subprocess.run(
        [sys.executable, "-m", "envs.bench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert benchmark_help.stdout.startswith("usage: python -m envs.bench")


def test_resume_of_a_missing_run_is_an_error(tmp_path):
    completed = run_cli("--resume", str(tmp_path / "nope"))
    assert completed.returncode == 2 and "no such run directory" in completed.stderr


def test_guide_style_flappy_bird_yaml_runs_as_is(tmp_path):
    from envs.flappy_bird import FlappyBirdVecEnv  # our own game: if it does not import, this fails

    # Exactly the guide's file; only the budget is cut to one update (64 envs x 128 steps).
    completed = run_cli(
        "--config",
        "configs/train_flappy_bird.yaml",
        "--set",
        "total_timesteps=8192",
        "--set",
        "gif_interval=0",
        "--runs-dir",
        str(tmp_path),
    )
    assert completed.returncode == 0, completed.stderr
    assert "needs no vector_env" in completed.stdout
    run_dir = only_run_dir(tmp_path)
    assert run_dir.name.startswith(f"{FlappyBirdVecEnv.name}-ppo-small-")
    assert (run_dir / "flappy_bird_ppo_final.pth").is_file()


def test_a_shipped_config_by_its_bare_name_from_any_folder(tmp_path, monkeypatch):
    from trainer.config.defaults import shipped_config_file

    monkeypatch.chdir(tmp_path)
    assert shipped_config_file("train_flappy_bird.yaml") == ROOT / "configs" / "train_flappy_bird.yaml"
    (tmp_path / "cartpole.yaml").write_text("env_name: snake\n")
    assert shipped_config_file("cartpole.yaml") == "cartpole.yaml"  # a file here wins
    for other in ("nothing.yaml", "../configs/snake.yaml", "sub/snake.yaml"):  # never a path into configs/
        assert shipped_config_file(other) == other


def tiny_finished_run(run_dir: Path, env_name: str = "cartpole") -> Path:
    """A finished run of 2 updates (256 steps), trained in this process."""
    from trainer.run.loop import train

    train(
        {
            "env_name": env_name,
            "num_envs": 8,
            "num_steps": 16,
            "mini_batch_size": 32,
            "update_epochs": 1,
            "total_timesteps": 256,
            "gif_interval": 0,
            "device": "cpu",
        },
        run_dir,
    )
    return run_dir


def test_evaluating_on_a_game_whose_observations_do_not_fit_names_both_shapes(tmp_path):
    run_dir = tiny_finished_run(tmp_path / "run")
    completed = run_cli("evaluate", str(run_dir / "cartpole_ppo_final.pth"), "--env", "snake", "--episodes", "1")
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip() == (
        "error: the model expects observations of shape [4] but snake gives [18]: "
        "evaluate it on the env it was trained on (cartpole)"
    )
    assert "mat1" not in completed.stderr and "Traceback" not in completed.stderr


def test_resume_of_a_finished_run_refuses_and_leaves_its_history_alone(tmp_path):
    run_dir = tiny_finished_run(tmp_path / "run")
    history = (run_dir / "metrics.jsonl").read_text()
    completed = run_cli("--resume", str(run_dir))
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip() == (
        f"error: run run finished at step 256 (its end is in {run_dir / 'metrics.jsonl'}); to train further, "
        f"continue it with --resume {run_dir} --set total_timesteps=M, M larger than 256 "
        f"(e.g. --set total_timesteps=512)"
    )
    assert (run_dir / "metrics.jsonl").read_text() == history
    assert history.count('"type":"end"') == 1
    # Not larger than where it finished: still nothing to train.
    assert run_cli("--resume", str(run_dir), "--set", "total_timesteps=256").returncode == 2
