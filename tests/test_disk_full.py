"""A run that fails for a full disk (ENOSPC) or a used-up quota (EDQUOT), wherever in training the
write fails, says so where people look: the `error` event the studio's status line shows, and the
CLI's error line. The run ends `failed`, once, and its folder is free for a resume."""

import errno
import html
import json
import queue as queue_module

import pytest

import trainer.run.checkpoint
import trainer.run.loop
import trainer.run.storage
from studio import views
from studio.history import RunFollower
from test_trainer_process import TINY as PROCESS_TINY
from trainer.cluster.process import run_training

TINY = {**PROCESS_TINY, "checkpoint": {"interval": 1}}  # a checkpoint after every update: the write that fails
FREE = 1_500_000  # what the disk is said to have left: the message shows it as 1.5 MB


def full_disk_at_checkpoints(monkeypatch):
    def refuse(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(trainer.run.checkpoint, "atomic_write", refuse)  # atomic_save's writer


def quota_used_up_at_config_yaml(monkeypatch):
    def refuse(run_dir, config):
        raise OSError(errno.EDQUOT, "Disk quota exceeded", str(run_dir / "config.yaml"))

    monkeypatch.setattr(trainer.run.loop, "write_config", refuse)  # a raw OSError, not a StorageError


@pytest.fixture(autouse=True)
def little_free_space(monkeypatch):
    monkeypatch.setattr(trainer.run.storage, "free_bytes", lambda path: FREE)


@pytest.mark.parametrize(
    "fail_write", [full_disk_at_checkpoints, quota_used_up_at_config_yaml], ids=["ENOSPC-checkpoint", "EDQUOT-config"]
)
def test_the_studio_shows_which_disk_is_full_and_the_run_ends_failed_once(tmp_path, monkeypatch, fail_write):
    fail_write(monkeypatch)
    run_dir = (tmp_path / "runs" / "cartpole-ppo-small-1").resolve()
    run_dir.mkdir(parents=True)
    events = queue_module.Queue()
    run_training(TINY, str(run_dir), events, None, False)  # the studio's entry point, in this process

    expected = f"the disk holding {run_dir} is full (1.5 MB free): free space or choose another --runs-dir"
    state = RunFollower(run_dir.name, run_dir).refresh(owner_alive=False)
    run = state.snapshot()
    assert run.status == "failed"
    assert run.error_message.startswith(expected), run.error_message
    assert "resume the run once there is room" in run.error_message
    assert html.escape(expected) in views.status_html(run)  # the status line / error box of the page

    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    ends = [event for event in history if event["type"] == "end"]
    assert len(ends) == 1 and ends[0]["status"] == "failed"
    assert [event["type"] for event in history][-2:] == ["error", "end"]
    assert not (run_dir / "owner.json").exists()  # released: the run can be resumed
    live = []
    while not events.empty():
        live.append(events.get_nowait())
    assert [event["type"] for event in live][-1] == "end"  # the live channel heard the end too


def test_the_cli_says_the_same_in_its_error_line(tmp_path, monkeypatch, capsys):
    from trainer.__main__ import main

    full_disk_at_checkpoints(monkeypatch)
    runs = tmp_path / "runs"
    settings = [f"--set={key}={value}" for key, value in TINY.items() if key != "checkpoint"]
    code = main([*settings, "--set", "checkpoint.interval=1", "--runs-dir", str(runs), "--quiet"])
    (run_dir,) = runs.iterdir()
    error = capsys.readouterr().err
    assert code == 1
    assert error.startswith(
        f"error: training failed: the disk holding {run_dir.resolve()} is full (1.5 MB free): "
        "free space or choose another --runs-dir"
    ), error
    assert "StorageError" not in error and "Traceback" not in error
