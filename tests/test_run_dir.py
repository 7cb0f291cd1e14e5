"""The run layout (trainer/run/run_dir.py): the documented folder, atomic writes of every run file,
the owner file, the status rule, and a CLI run with its own checkpoint.path in the studio."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import trainer.run.run_dir as run_dir_module
from trainer.run.run_dir import (LAYOUT, RunOwnedError, RunOwner, checkpoint_folder, latest_checkpoint_path,
                             live_owner, remove_stale_temporaries, run_status, take_ownership)

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_draw_the_layout_in_code():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("### Run directory"):text.index("### Events (the schema")]
    block = section[section.index("runs/<run_id>/"):]
    block = block[:block.index("```")]
    documented = [line.split()[0] for line in block.splitlines()[1:] if line.strip()]
    assert sorted(documented) == sorted(LAYOUT)


def test_only_the_atomic_writer_replaces_files():
    callers = [str(path.relative_to(ROOT)) for folder in ("trainer", "studio", "envs", "benchmarks")
               for path in (ROOT / folder).glob("*.py")
               if re.search(r"\bos\.(replace|rename)\(", path.read_text(encoding="utf-8"))]
    assert callers == ["trainer/run/run_dir.py"]


def _writers(run: Path):
    """Each writer of a run file, with the file it writes."""
    import torch

    from studio import views
    from studio.history import RunState
    from trainer.run.checkpoint import atomic_save
    from trainer.run.events import trim_events_after
    from trainer.run.gif import write_gif
    from trainer.run.run_dir import write_config

    frames = [np.zeros((8, 8, 3), dtype=np.uint8)] * 2
    snapshot = RunState(run_id=run.name, run_dir=run, metrics=[{"step": 1}]).snapshot()
    return {
        "config.yaml": lambda: write_config(run, {"env_name": "cartpole"}),
        "checkpoints/ckpt_1.pth": lambda: atomic_save({"weights": torch.ones(3)}, run / "checkpoints" / "ckpt_1.pth"),
        "rollouts/step_1.gif": lambda: write_gif(frames, run / "rollouts" / "step_1.gif"),
        "metrics.csv": lambda: views.write_metrics_csv(snapshot),
        "metrics.jsonl": lambda: trim_events_after(run / "metrics.jsonl", 0),
    }


def test_every_run_file_is_written_atomically(tmp_path, monkeypatch):
    run = tmp_path / "run"
    writers = _writers(run)
    for name in writers:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(json.dumps({"type": "metrics", "step": 5, "old": name}) + "\n")

    def fail(descriptor):  # the data is in the temporary file; the crash comes before the rename
        raise OSError("disk full")

    monkeypatch.setattr(run_dir_module.os, "fsync", fail)
    for name, write in writers.items():
        with pytest.raises(OSError, match="disk full"):
            write()
        assert json.loads((run / name).read_text())["old"] == name, f"{name} was damaged"
    leftovers = [path.name for path in run.rglob("*") if path.is_file() and path.name.endswith(".tmp")]
    assert leftovers == []
    monkeypatch.undo()
    for write in writers.values():
        write()
    assert "old" not in (run / "config.yaml").read_text()


def test_checkpoint_folder_honours_checkpoint_path(tmp_path):
    from trainer.config.keys import config_from_dict

    assert checkpoint_folder(tmp_path, {"env_name": "cartpole"}) == tmp_path / "checkpoints"
    assert checkpoint_folder(tmp_path, {"checkpoint": {"path": "saves/a"}}) == tmp_path / "saves" / "a"
    assert checkpoint_folder(tmp_path, config_from_dict({"checkpoint": {"path": str(tmp_path / "abs")}})) \
        == tmp_path / "abs"
    (tmp_path / "saves" / "a").mkdir(parents=True)
    for step in (500, 1000, 90):
        (tmp_path / "saves" / "a" / f"ckpt_{step}.pth").write_bytes(b"x")
    (tmp_path / "config.yaml").write_text("checkpoint:\n  path: saves/a\n")
    assert latest_checkpoint_path(tmp_path) == tmp_path / "saves" / "a" / "ckpt_1000.pth"  # by step, not by name


@pytest.mark.parametrize("end, alive, started, stopping, status", [
    ("finished", True, False, False, "finished"),
    ("stopped", False, False, False, "stopped"),
    ("exploded", False, False, False, "failed"),
    (None, True, True, False, "running"),
    (None, True, False, False, "starting"),
    (None, True, True, True, "stopping"),
    (None, False, True, False, "interrupted"),
    (None, False, True, True, "interrupted"),
])
def test_the_status_rule(end, alive, started, stopping, status):
    assert run_status(end, alive, started, stopping) == status


@pytest.fixture
def other_process():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def _write_owner(run: Path, pid: int, process_started: float | None) -> None:
    run.mkdir(parents=True, exist_ok=True)
    owner = RunOwner(pid=pid, host=socket.gethostname(), started_at=time.time(), process_started=process_started)
    (run / "owner.json").write_text(json.dumps(owner.__dict__))


def test_one_owner_per_run_folder(tmp_path, other_process):
    import psutil

    run = tmp_path / "run"
    _write_owner(run, other_process.pid, psutil.Process(other_process.pid).create_time())
    with pytest.raises(RunOwnedError, match=f"process {other_process.pid} on host {socket.gethostname()}"):
        take_ownership(run)
    _write_owner(run, other_process.pid, process_started=12.0)  # the pid was reused by another process
    assert live_owner(run) is None
    other_process.kill()
    other_process.wait()
    _write_owner(run, other_process.pid, process_started=None)  # a dead owner's leftover
    owner = take_ownership(run)
    assert live_owner(run) == owner and owner.pid == os.getpid()
    owner.release(run)
    assert not (run / "owner.json").exists()


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path, other_process):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    mine = tmp_path / f".ckpt_1.pth.{os.getpid()}.0123abcd.tmp"
    living = tmp_path / f".ckpt_2.pth.{other_process.pid}.0123abcd.tmp"
    gone = tmp_path / f".ckpt_3.pth.{int(dead.stdout)}.0123abcd.tmp"
    for path in (mine, living, gone):
        path.write_bytes(b"partial")
    remove_stale_temporaries(tmp_path)
    assert mine.exists() and living.exists() and not gone.exists()


def _tiny_config(**overrides) -> dict:
    raw = {"env_name": "cartpole", "num_envs": 8, "num_steps": 16, "mini_batch_size": 64, "update_epochs": 1,
           "total_timesteps": 8 * 16 * 6, "gif_interval": 0, "seed": 5, "device": "cpu",
           "checkpoint": {"interval": 2, "keep": 2, "path": "saved/here"}}
    raw.update(overrides)
    return raw


def test_a_cli_run_with_its_own_checkpoint_path_is_listed_and_resumed_by_the_studio(tmp_path):
    from studio.runs import RunManager
    from trainer.run.loop import train
    from trainer.run.run_dir import create_run_dir

    config = _tiny_config()
    run = create_run_dir(config, tmp_path)
    updates = []

    def stop_after_three() -> bool:
        return len(updates) >= 3

    train(config, run, sinks=[lambda event: updates.append(event) if event["type"] == "metrics" else None],
          should_stop=stop_after_three)
    assert not (run / "checkpoints").exists() and (run / "saved" / "here" / "ckpt_384.pth").is_file()

    manager = RunManager(tmp_path)
    listed = {snapshot.run_id: snapshot for snapshot in manager.list_runs()}
    assert listed[run.name].status == "stopped"
    assert listed[run.name].latest_checkpoint == str(run / "saved" / "here" / "ckpt_384.pth")
    manager.resume(run.name)  # the real trainer, in a spawned process
    deadline = time.time() + 240
    while manager.get(run.name).is_active:
        assert time.time() < deadline, "the resumed run did not end"
        time.sleep(0.2)
    resumed = manager.get(run.name)
    assert resumed.status == "finished", resumed.error_message
    steps = [metric["step"] for metric in resumed.metrics]
    assert steps == [128 * update for update in range(1, 7)]  # continued from 384, no step twice
    assert not (run / "owner.json").exists()
