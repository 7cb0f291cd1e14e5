"""A run folder's layout, in one place: its names, the paths to them, making a folder, its config.

The trainer writes a run folder through these functions and the studio reads one through them, so
the two never disagree about where a file is. No other module spells a run file's name
(tests/test_run_dir.py scans for that). Imports neither torch nor the studio. `LAYOUT` is the
layout; the README's table is generated from it (`layout_markdown`) and docs/architecture.md
("Run directory") lists the same entries (tests/test_run_dir.py keeps them equal).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.run.files import atomic_write

CONFIG_FILE = "config.yaml"
EVENTS_FILE = "metrics.jsonl"
LOG_FILE = "train.log"
OWNER_FILE = "owner.json"
METRICS_CSV_FILE = "metrics.csv"
CHECKPOINTS_DIR = "checkpoints"
ROLLOUTS_DIR = "rollouts"
TENSORBOARD_DIR = "tensorboard"
FINAL_MODEL_SUFFIX = "_final.pth"
BEST_FILE = "best.json"
NOTES_FILE = "notes.json"
NODES_FILE = "nodes.json"

LAYOUT: dict[str, str] = {
    CONFIG_FILE: "the validated config, every key (derived values filled in)",
    EVENTS_FILE: "every event, one JSON object per line (the durable history)",
    LOG_FILE: "the log lines, with timestamps",
    OWNER_FILE: "pid, host and start time of the process training in the folder (while it trains)",
    f"{CHECKPOINTS_DIR}/ckpt_<step>.pth": "every `checkpoint.interval` updates and at the end; the last "
    "`checkpoint.keep` kept, plus the best (`checkpoint.path` moves the folder)",
    f"{CHECKPOINTS_DIR}/{BEST_FILE}": "step and `recent_return_mean` of the best checkpoint (`checkpoint.keep_best`)",
    f"{ROLLOUTS_DIR}/step_<step>.gif": "rollout GIFs",
    f"<env>_<algo>{FINAL_MODEL_SUFFIX}": "the final model, e.g. `flappy_bird_ppo_final.pth`",
    METRICS_CSV_FILE: "the metrics as CSV (written by the studio's download)",
    f"{TENSORBOARD_DIR}/": "TensorBoard scalars, with `tensorboard: true` (then `tensorboard --logdir runs`)",
    NOTES_FILE: "the name and notes a person gave the run (the studio's Runs tab)",
    NODES_FILE: "the node table of a cluster run: each node, its ranks and speed, connect / lost lines "
    "(kept by the master, shown by the studio)",
}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_CHECKPOINT_NAME = re.compile(r"^ckpt_(\d+)\.pth$")


def layout_markdown() -> str:
    """The README's run-folder table (docs/build.py), one row per LAYOUT entry."""
    rows = [f"| `{name}` | {meaning} |" for name, meaning in LAYOUT.items()]
    return "\n".join(["| in `runs/<run_id>/` | what it holds |", "|---|---|", *rows])


# ---------------------------------------------------------------------------------------------
# Names


def safe_name(text: str) -> str:
    """Only [A-Za-z0-9._-]; anything else becomes '_'."""
    return _UNSAFE.sub("_", text).strip("._") or "run"


def env_label(env_name: str) -> str:
    """`cartpole` for CartPole-v1, `Acrobot-v1` for a Gymnasium id: the name used in file names."""
    try:
        from envs import resolve_env_name  # imports torch: only when a name is made, never to read

        env_name = resolve_env_name(env_name)
    except Exception:  # noqa: BLE001 - a label must never fail
        pass
    return safe_name(env_name.replace("gym:", "").split(":")[-1])


def _setting(config: Any, name: str, default: Any = None) -> Any:
    """`config.name` of a TrainConfig or `config[name]` of a plain dict (config.yaml, the studio)."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def new_run_id(config: Any, runs_dir: str | Path) -> str:
    """`<env>-<model>-<YYYYmmdd-HHMMSS>[-n]` (`<env>-<algo>-<model>-...` for an algorithm other than
    ppo), not yet taken in `runs_dir`."""
    env = env_label(str(_setting(config, "env_name") or "env"))
    algo = str(_setting(config, "algo") or "ppo")
    model = safe_name(str(_setting(config, "model_type") or "model"))
    named = f"{env}-{model}" if algo == "ppo" else f"{env}-{safe_name(algo)}-{model}"
    base = f"{named}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, number = base, 1
    while (Path(runs_dir) / candidate).exists():
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def create_run_dir(config: Any, runs_dir: str | Path = "runs") -> Path:
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


# ---------------------------------------------------------------------------------------------
# Paths: one function per entry of LAYOUT


def config_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CONFIG_FILE


def events_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / EVENTS_FILE


def log_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOG_FILE


def owner_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / OWNER_FILE


def metrics_csv_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / METRICS_CSV_FILE


def tensorboard_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / TENSORBOARD_DIR


def notes_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / NOTES_FILE


def nodes_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / NODES_FILE


def rollout_gif_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / ROLLOUTS_DIR / f"step_{step}.gif"


def final_model_path(run_dir: str | Path, config: Any) -> Path:
    """Where the trainer writes the final model: `<env>_<algo>_final.pth`."""
    name = f"{env_label(str(_setting(config, 'env_name') or 'env'))}_{_setting(config, 'algo') or 'ppo'}"
    return Path(run_dir) / (name + FINAL_MODEL_SUFFIX)


def find_final_model(run_dir: str | Path) -> Path | None:
    """The final model of a run folder, if it has one (the newest, should there be several)."""
    finals = [path for path in Path(run_dir).glob("*" + FINAL_MODEL_SUFFIX) if path.is_file()]
    return max(finals, key=lambda path: (path.stat().st_mtime, path.name)) if finals else None


def checkpoint_folder(run_dir: str | Path, config: Any = None) -> Path:
    """`<run_dir>/checkpoints`, or `checkpoint.path` (relative paths are inside the run folder)."""
    section = _setting(config, "checkpoint") if config is not None else None
    custom = _setting(section, "path") if isinstance(section, Mapping) or hasattr(section, "path") else None
    if not custom:
        return Path(run_dir) / CHECKPOINTS_DIR
    path = Path(os.path.expanduser(str(custom)))
    return path if path.is_absolute() else Path(run_dir) / path


def checkpoint_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"ckpt_{step}.pth"


def best_path(folder: str | Path) -> Path:
    """best.json of a checkpoint folder (which checkpoint retention spares however old)."""
    return Path(folder) / BEST_FILE


def list_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint in `folder`, oldest first (temporary files ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _CHECKPOINT_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


def latest_checkpoint_path(run_dir: str | Path, config: Any = None) -> Path | None:
    """The newest checkpoint file of a run (not opened: `trainer.run.checkpoint` loads it)."""
    if config is None:
        config = read_config(run_dir)
    found = list_checkpoints(checkpoint_folder(run_dir, config))
    return found[-1][1] if found else None


def holds_a_run(run_dir: Path, config: Any) -> bool:
    """The folder already has events or checkpoints of a run (so training into it is a resume)."""
    metrics = events_path(run_dir)
    return (metrics.is_file() and metrics.stat().st_size > 0) or bool(
        list_checkpoints(checkpoint_folder(run_dir, config))
    )


# ---------------------------------------------------------------------------------------------
# config.yaml


def write_config(run_dir: str | Path, config: Any) -> Path:
    """config.yaml: every key of a TrainConfig (or a dict already validated into one)."""
    from trainer.config.safe_yaml import dump_yaml

    data = dict(config) if isinstance(config, Mapping) else config.to_dict()
    return atomic_write(config_path(run_dir), dump_yaml(data))


def read_config(run_dir: str | Path) -> dict:
    """config.yaml as a dict; {} when it is missing or unreadable (a listing must not fail)."""
    from trainer.config.safe_yaml import YamlError, load_yaml_file

    try:
        return load_yaml_file(config_path(run_dir))
    except (YamlError, OSError):
        return {}


# ---------------------------------------------------------------------------------------------
# A sweep's folder (trainer/sweep): `runs/sweeps/<name>/`, beside the run folders. Each trial's
# run is a normal run folder (LAYOUT above), one per trial and seed, under trials/.

SWEEPS_DIR = "sweeps"
STUDY_FILE = "study.db"
BEST_CONFIG_FILE = "best.yaml"
TRIALS_DIR = "trials"
SWEEP_FILE, SWEEP_BASE_FILE, SWEEP_LOG_FILE = "sweep.yaml", "base.yaml", "sweep.log"  # the studio's (Sweeps tab)

SWEEP_LAYOUT: dict[str, str] = {
    STUDY_FILE: "the Optuna study (SQLite), unless `--storage` names another database",
    BEST_CONFIG_FILE: "the best trial's full config, for `python -m trainer --config best.yaml`",
    f"{TRIALS_DIR}/<trial>-seed<seed>/": "the run folder of one trial and seed, laid out as `runs/<run_id>/`",
    SWEEP_FILE: "a sweep started in the studio: its sweep file (and `base.yaml`, its base config)",
    SWEEP_LOG_FILE: "a sweep started in the studio: the sweep's output lines",
}


def sweep_folder(runs_dir: str | Path, name: str) -> Path:
    """`<runs_dir>/sweeps/<name>` (the name made safe): a sweep's study, best config and trials."""
    return Path(runs_dir) / SWEEPS_DIR / safe_name(name)


def study_path(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / STUDY_FILE


def best_config_path(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / BEST_CONFIG_FILE


def trials_folder(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / TRIALS_DIR


def trial_run_path(sweep_dir: str | Path, trial_number: int, seed: int) -> Path:
    """The run folder of trial `trial_number` trained with `seed`: `trials/0007-seed1`."""
    return trials_folder(sweep_dir) / f"{int(trial_number):04d}-seed{int(seed)}"


# ---------------------------------------------------------------------------------------------
# The run queue (trainer/run/run_queue.py): `runs/queue/`, beside the run folders. The studio and
# every sweep on the same runs folder take their slots from it.

QUEUE_DIR = "queue"
QUEUE_FILE = "queue.json"
QUEUE_LOCK_FILE = "queue.lock"

QUEUE_LAYOUT: dict[str, str] = {
    QUEUE_FILE: "the runs that hold a slot and those waiting in line, in order (changed only under the lock)",
    QUEUE_LOCK_FILE: "the lock every change of the queue takes (empty)",
}


def queue_folder(runs_dir: str | Path) -> Path:
    """`<runs_dir>/queue`: the run queue of everything that trains in this runs folder."""
    return Path(runs_dir) / QUEUE_DIR


def queue_path(runs_dir: str | Path) -> Path:
    return queue_folder(runs_dir) / QUEUE_FILE


def queue_lock_path(runs_dir: str | Path) -> Path:
    return queue_folder(runs_dir) / QUEUE_LOCK_FILE
