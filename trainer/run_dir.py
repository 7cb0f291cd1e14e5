"""Run directories: `runs/<env>-<model>-<YYYYmmdd-HHMMSS>[-n]/`.

    config.yaml              the validated config, every key
    metrics.jsonl            every event, one JSON object per line
    train.log                the log lines
    checkpoints/ckpt_<step>.pth
    rollouts/step_<step>.gif
    <env>_<algo>_final.pth
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from trainer.config import TrainConfig, to_yaml

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """Only [A-Za-z0-9._-]; anything else becomes '_'."""
    return _UNSAFE.sub("_", text).strip("._") or "run"


def env_label(env_name: str) -> str:
    """`cartpole` for CartPole-v1, `Acrobot-v1` for a Gymnasium id: the name used in file names."""
    try:
        from envs import resolve_env_name

        env_name = resolve_env_name(env_name)
    except Exception:  # noqa: BLE001 - a label must never fail
        pass
    return safe_name(env_name.replace("gym:", "").split(":")[-1])


def new_run_id(config: TrainConfig, runs_dir: str | Path) -> str:
    base = f"{env_label(config.env_name)}-{safe_name(config.model_type)}-{time.strftime('%Y%m%d-%H%M%S')}"
    runs_dir = Path(runs_dir)
    candidate, number = base, 1
    while (runs_dir / candidate).exists():
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def create_run_dir(config: TrainConfig, runs_dir: str | Path = "runs") -> Path:
    """Make a fresh, uniquely named run directory under `runs_dir` and return its path."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    while True:
        run_dir = runs_dir / new_run_id(config, runs_dir)
        try:
            run_dir.mkdir()
            return run_dir.resolve()
        except FileExistsError:  # another process took the name in the meantime
            continue


def final_model_path(run_dir: Path, config: TrainConfig) -> Path:
    return Path(run_dir) / f"{env_label(config.env_name)}_{config.algo}_final.pth"


def checkpoint_folder(run_dir: Path, config: TrainConfig) -> Path:
    if config.checkpoint.path is None:
        return Path(run_dir) / "checkpoints"
    path = Path(os.path.expanduser(config.checkpoint.path))
    return path if path.is_absolute() else Path(run_dir) / path


def write_config(run_dir: Path, config: TrainConfig) -> Path:
    path = Path(run_dir) / "config.yaml"
    temporary = path.with_name("config.yaml.tmp")
    temporary.write_text(to_yaml(config), encoding="utf-8")
    os.replace(temporary, path)
    return path
