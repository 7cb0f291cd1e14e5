"""A studio that dies never leaves a trainer nobody controls (issue 10, item 4).

SIGKILL the studio while its run trains: the trainer notices its parent is gone, stops cleanly
(checkpoint, final model, `end` event) and exits by itself; it never gets a second writer, and
the run can be resumed afterwards. A trainer the studio did not start (the CLI, or an earlier
studio) is adopted: the studio shows it running and its Stop ends it with status `stopped`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from gradio_client import Client

from test_studio_helpers import REPO, start_studio

LONG_RUN = {"total_timesteps": 10_000_000, "gif_interval": 0, "checkpoint.interval": 2, "num_envs": 4, "num_steps": 32}


def wait_for(condition, timeout: float, what: str):
    """Poll `condition` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")


def events(run_dir: Path) -> list[dict]:
    """The run's events so far: none before the trainer makes metrics.jsonl (it takes owner.json
    first), and never a line it is still writing."""
    try:
        text = (run_dir / "metrics.jsonl").read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    whole = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def owner_pid(run_dir: Path) -> int | None:
    try:
        return int(json.loads((run_dir / "owner.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def test_sigkill_of_the_studio_stops_its_trainer_cleanly_and_the_run_resumes(tmp_path):
    runs = tmp_path / "runs"
    studio = start_studio(runs, tmp_path / "studio.log")
    try:
        client = Client(studio.url, verbose=False)
        run_id = client.predict("cartpole", LONG_RUN, api_name="/start")["run_id"]
        run_dir = runs / run_id
        wait_for(lambda: client.predict(run_id, api_name="/poll")["step"] > 0, 90, "the run has steps")
        trainer = owner_pid(run_dir)
        assert trainer is not None and trainer != studio.process.pid
        os.kill(studio.process.pid, signal.SIGKILL)  # the studio only: its trainer is left behind
        studio.process.wait(10)
        wait_for(lambda: exited(trainer), 60, f"the orphaned trainer {trainer} has exited")
    finally:
        studio.stop()

    history = events(run_dir)
    assert history[-1]["type"] == "end" and history[-1]["status"] == "stopped"
    assert [event["type"] for event in history].count("start") == 1, "a second writer appeared"
    assert not (run_dir / "owner.json").exists()
    assert any(event["type"] == "log" and "stop requested" in event.get("message", "") for event in history)

    from studio.runs import RunManager  # what a restarted studio sees and does

    manager = RunManager(runs)
    assert [(run.run_id, run.status) for run in manager.list_runs()] == [(run_id, "stopped")]
    manager.resume(run_id)
    wait_for(lambda: manager.get(run_id).step > history[-1]["step"], 60, "the resumed run trains on")
    manager.stop(run_id)
    wait_for(lambda: manager.get(run_id).status == "stopped", 60, "the resumed run has stopped")
    manager.shutdown()
    starts = [event for event in events(run_dir) if event["type"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed_from_step"] == history[-1]["step"]


def test_a_studio_adopts_a_trainer_it_did_not_start_and_its_stop_works(tmp_path):
    runs = tmp_path / "runs"
    run_dir = runs / "cli-run"
    settings = [f"--set={key}={value}" for key, value in LONG_RUN.items()]
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            "--config",
            "configs/cartpole.yaml",
            *settings,
            "--run-dir",
            str(run_dir),
            "--quiet",
            "--no-progress",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "cli.log", "wb"),
    )
    try:
        wait_for(
            lambda: owner_pid(run_dir) == cli.pid and any(e["type"] == "metrics" for e in events(run_dir)),
            90,
            "the CLI run trains",
        )
        studio = start_studio(runs, tmp_path / "studio.log")
        try:
            client = Client(studio.url, verbose=False)
            assert client.predict("cli-run", api_name="/poll")["status"] == "running"
            assert client.predict("cli-run", api_name="/stop")["status"] == "stopping"
            wait_for(
                lambda: client.predict("cli-run", api_name="/poll")["status"] == "stopped",
                60,
                "the adopted run has stopped",
            )
        finally:
            studio.stop()
        assert cli.wait(30) == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    history = events(run_dir)
    assert history[-1]["type"] == "end" and history[-1]["status"] == "stopped"
    assert [event["type"] for event in history].count("start") == 1


@pytest.mark.parametrize("owner", [{"pid": 1}, {"pid": "self"}])
def test_stop_never_signals_a_process_that_is_not_a_trainer(tmp_path, owner):
    """owner.json is a file anyone could write: it cannot make the studio kill init or itself."""
    import socket

    from studio.runs import RunError, RunManager
    from trainer.run.owner import RunOwner
    from trainer.run.processes import process_started

    pid = os.getpid() if owner["pid"] == "self" else owner["pid"]
    run_dir = tmp_path / "crafted"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"type": "start", "time": time.time()}) + "\n")
    record = RunOwner(pid=pid, host=socket.gethostname(), started_at=time.time(), process_started=process_started(pid))
    (run_dir / "owner.json").write_text(json.dumps(record.__dict__))
    with pytest.raises(RunError, match="is not running here"):
        RunManager(tmp_path).stop("crafted")
