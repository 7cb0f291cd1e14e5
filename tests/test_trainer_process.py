"""The studio's entry point, trainer.cluster.process.run_training: events on a queue, errors as events,
always an `end`, and a stop event that ends the run cleanly."""

import multiprocessing
import queue as queue_module
import sys
import time
from pathlib import Path

import pytest

from trainer.cluster.process import run_training

TINY = {
    "env_name": "cartpole",
    "num_envs": 8,
    "num_steps": 16,
    "mini_batch_size": 32,
    "update_epochs": 1,
    "total_timesteps": 8 * 16 * 3,
    "gif_interval": 0,
    "torch_threads": 1,
    "device": "cpu",
}


def drain(q) -> list[dict]:
    events = []
    while True:
        try:
            events.append(q.get_nowait())
        except queue_module.Empty:
            return events


def test_events_arrive_in_order_and_end_the_run(tmp_path, test_device):
    q = queue_module.Queue()
    run_training({**TINY, "device": test_device}, str(tmp_path / "run"), q, None, False)
    events = drain(q)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert kinds.count("metrics") == 3 and "model" in kinds and "checkpoint" in kinds
    assert events[-1]["status"] == "finished" and Path(events[-1]["final_model"]).is_file()
    assert events[0]["run_id"] == "run" and events[0]["config"]["num_envs"] == 8
    metrics = [event for event in events if event["type"] == "metrics"]
    assert [event["step"] for event in metrics] == [128, 256, 384]


def test_invalid_config_becomes_an_error_event_then_end(tmp_path):
    q = queue_module.Queue()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_training({**TINY, "learnig_rate": 0.1}, str(run_dir), q, None, False)
    events = drain(q)
    assert [event["type"] for event in events] == ["error", "end"]
    assert "learning_rate" in events[0]["message"] and "Traceback" in events[0]["traceback"]
    assert events[1]["status"] == "failed" and events[1]["final_model"] is None
    assert "learnig_rate" in (run_dir / "train.log").read_text()


def test_failure_during_training_is_reported_with_traceback(tmp_path):
    q = queue_module.Queue()
    run_training({**TINY, "env_kwargs": {"no_such_option": 1}}, str(tmp_path / "run"), q, None, False)
    events = drain(q)
    assert events[-1]["type"] == "end" and events[-1]["status"] == "failed"
    errors = [event for event in events if event["type"] == "error"]
    assert len(errors) == 1 and "no_such_option" in errors[0]["message"]


@pytest.mark.skipif(sys.platform == "win32", reason="posix spawn timing")
def test_spawned_process_stops_on_the_stop_event(tmp_path):
    context = multiprocessing.get_context("spawn")
    q, stop = context.Queue(), context.Event()
    config = {**TINY, "total_timesteps": 10_000_000}
    process = context.Process(target=run_training, args=(config, str(tmp_path / "run"), q, stop, False))
    process.start()
    events = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            event = q.get(timeout=max(0.1, deadline - time.monotonic()))
            events.append(event)
            if event["type"] == "metrics" and event["update"] == 2:
                stop.set()
            if event["type"] == "end":
                break
        process.join(timeout=60)
    finally:
        if process.is_alive():
            process.kill()
    assert events[-1]["type"] == "end" and events[-1]["status"] == "stopped"
    assert Path(events[-1]["final_model"]).is_file()
    assert any(event["type"] == "checkpoint" for event in events)
    assert process.exitcode == 0


def test_process_module_does_not_import_ui_code():
    import subprocess

    code = (
        "import sys, trainer.cluster.process, trainer.run.loop, trainer.run.checkpoint; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('gradio', 'studio', 'tensorboard')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
