"""The preflight's warnings (trainer/config/preflight.py run_warnings): a run that starts, but
likely not as meant. Written once there; the CLI prints them, the studio's form shows them
(tests/test_studio_form.py, tests/test_browser_rough_edges.py)."""

from __future__ import annotations

from test_trainer_cli import run_cli
from trainer.config.validation import config_from_dict


def test_preflight_warns_of_an_update_larger_than_the_run_and_of_a_large_share_of_memory(monkeypatch):
    from trainer.config import preflight

    huge_update = config_from_dict(
        {"env_name": "cartpole", "num_envs": 1024, "num_steps": 32, "total_timesteps": 10_000}
    )
    (warning,) = preflight.check_run_fits(huge_update)
    assert "32_768 steps, more than total_timesteps (10_000)" in warning and "single update" in warning
    assert preflight.check_run_fits(config_from_dict({"env_name": "cartpole", "num_envs": 8})) == []

    ordinary = config_from_dict({"env_name": "cartpole", "num_envs": 8, "total_timesteps": 10**6})
    needed = preflight.estimated_bytes(ordinary, *preflight.probe_spaces(ordinary))
    monkeypatch.setattr(preflight, "free_bytes", lambda device: (int(needed / 0.5), "this machine"))
    (warning,) = preflight.check_run_fits(ordinary)  # half the free memory: starts, with a warning
    assert "num_envs x num_steps = 8 x 128" in warning and "50% of the" in warning and "this machine" in warning


def test_the_cli_prints_the_warning_and_still_trains(tmp_path):
    completed = run_cli(
        "--set",
        "env_name=cartpole",
        "--set",
        "num_envs=64",
        "--set",
        "num_steps=16",
        "--set",
        "total_timesteps=500",
        "--set",
        "gif_interval=0",
        "--set",
        "device=cpu",
        "--runs-dir",
        str(tmp_path),
    )
    assert completed.returncode == 0, completed.stderr
    assert "warning: one update collects num_envs x num_steps = 64 x 16 = 1_024 steps" in completed.stderr
