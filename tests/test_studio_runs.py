"""RunManager and RunState against small fake trainers (no torch, started like the real one).

The fakes follow the trainer's contract (docs/architecture.md): they append their events to
metrics.jsonl (the studio passes no queue), watch the stop event between updates, and end with `end`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from studio.run_paths import RunError, RunLimitError, UnknownRunError, safe_run_file, validate_run_id
from studio.runs import RunManager
from studio.trainer_process import TRAINER_PRELOAD, TRAINER_START_METHOD
from trainer.run.layout import latest_checkpoint_path
from trainer.run.owner import RunOwner, take_ownership

CONFIG = {"env_name": "cartpole", "model_type": "ppo-small", "total_timesteps": 1000, "seed": 1}


# ----------------------------------------------------------------------------- fake trainers


def _emitter(run_dir: str, queue):
    def emit(event_type: str, **fields):
        event = {"type": event_type, "time": time.time(), **fields}
        with open(Path(run_dir) / "metrics.jsonl", "a", encoding="utf-8") as history:
            history.write(json.dumps(event) + "\n")

    return emit


def _save(path: Path, content: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return str(path)


def fake_trainer(config, run_dir, queue, stop_event, resume, updates=10, delay=0.0, forever=False):
    owner = take_ownership(run_dir)  # as trainer.run.loop.train does
    emit = _emitter(run_dir, queue)
    run_path = Path(run_dir)
    first_update = 0
    if resume:
        first_update = int(latest_checkpoint_path(run_path, config).stem.split("_")[1]) // 100
    emit(
        "start",
        run_id=run_path.name,
        config=config,
        device="cpu",
        total_timesteps=config["total_timesteps"],
        resumed_from_step=first_update * 100 if resume else None,
    )
    update = first_update
    status = "finished"
    while forever or update < first_update + updates:
        if stop_event.is_set():
            status = "stopped"
            break
        update += 1
        step = update * 100
        emit(
            "metrics",
            step=step,
            update=update,
            fps=5000.0,
            elapsed=update * 0.02,
            episodes=update,
            episode_return_mean=float(update * 10),
            episode_length_mean=float(update * 10),
            episode_score_mean=float(update),
            recent_return_mean=float(update * 9),
            policy_loss=-0.01,
            value_loss=1.0 / update,
            entropy=0.69,
            approx_kl=0.01,
            clip_fraction=0.1,
            explained_variance=0.5,
            learning_rate=3e-4,
        )
        emit("log", level="info", message=f"[STEP {step}] EpRewMean: {update * 10.0}")
        if update % 5 == 0:
            emit("checkpoint", step=step, path=_save(run_path / "checkpoints" / f"ckpt_{step}.pth", b"ckpt"))
            emit(
                "gif",
                step=step,
                path=_save(run_path / "rollouts" / f"step_{step}.gif", b"GIF89a"),
                episode_return=10.0,
                episode_score=1.0,
                frames=3,
            )
        time.sleep(delay)
    model = _save(run_path / "cartpole_ppo_final.pth", b"model")
    emit("checkpoint", step=update * 100, path=_save(run_path / "checkpoints" / f"ckpt_{update * 100}.pth", b"c"))
    emit("model", step=update * 100, path=model)
    emit("end", status=status, step=update * 100, final_model=model)
    owner.release(run_dir)


def fake_endless_trainer(config, run_dir, queue, stop_event, resume):
    fake_trainer(config, run_dir, queue, stop_event, resume, delay=0.05, forever=True)


def fake_failing_trainer(config, run_dir, queue, stop_event, resume):
    emit = _emitter(run_dir, queue)
    emit("start", run_id=Path(run_dir).name, config=config, device="cpu", total_timesteps=1000, resumed_from_step=None)
    emit(
        "error",
        message="ValueError: mini_batch_size 7 does not divide 64",
        traceback="Traceback (most recent call last):\n  File loop.py\nValueError: mini_batch_size 7 does not divide 64",
    )
    emit("end", status="failed", step=0, final_model=None)


def fake_dying_trainer(config, run_dir, queue, stop_event, resume):
    take_ownership(run_dir)  # left behind: its process is gone
    emit = _emitter(run_dir, queue)
    emit("start", run_id=Path(run_dir).name, config=config, device="cpu", total_timesteps=1000, resumed_from_step=None)
    os._exit(3)  # dies without an end event, as a segfault or the OOM killer would


# ----------------------------------------------------------------------------- helpers


def wait_for(condition, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def report_start(config, run_dir, queue, stop_event, resume):
    """Writes what a trainer process finds when it starts: which of the trainer's modules are
    already imported, its OS parent's command line, and the process that created it."""
    import psutil

    Path(run_dir, "start.json").write_text(
        json.dumps(
            {
                "preloaded": [name for name in TRAINER_PRELOAD if name in sys.modules],
                "os_parent": " ".join(psutil.Process(os.getppid()).cmdline()),
                "creator": multiprocessing.parent_process().pid,
            }
        )
    )


def wait_until_ended(manager: RunManager, run_id: str):
    wait_for(lambda: not manager.get(run_id).is_active and manager.active_count() == 0)
    return manager.get(run_id)


# ----------------------------------------------------------------------------- tests


def test_run_trains_to_the_end_and_everything_reaches_the_state(tmp_path):
    manager = RunManager(tmp_path, target=fake_trainer)
    state = manager.start(CONFIG)
    assert state.run_id.startswith("cartpole-ppo-small-")
    run = wait_until_ended(manager, state.run_id)
    assert run.status == "finished"
    assert [m["step"] for m in run.metrics] == [100 * i for i in range(1, 11)]
    assert run.step == 1000 and run.progress == 1.0
    assert run.best_return == 100.0 and run.last_return == 90.0
    assert run.final_model and Path(run.final_model).name == "cartpole_ppo_final.pth"
    assert run.latest_gif is not None and run.latest_gif.step == 1000
    assert run.log_tail[-1] == "[STEP 1000] EpRewMean: 100.0"
    assert (tmp_path / state.run_id / "config.yaml").exists()
    assert [r.run_id for r in manager.list_runs()] == [state.run_id]


def test_stop_ends_the_run_as_stopped_with_a_saved_model(tmp_path):
    manager = RunManager(tmp_path, target=fake_endless_trainer)
    state = manager.start(CONFIG)
    wait_for(lambda: len(manager.get(state.run_id).metrics) >= 3)
    assert manager.stop(state.run_id).status == "stopping"
    run = wait_until_ended(manager, state.run_id)
    assert run.status == "stopped"
    assert run.final_model and Path(run.final_model).exists()
    with pytest.raises(RunError, match="not running"):
        manager.stop(state.run_id)


def test_trainer_error_marks_run_failed_with_traceback_tail(tmp_path):
    manager = RunManager(tmp_path, target=fake_failing_trainer)
    run = wait_until_ended(manager, manager.start(CONFIG).run_id)
    assert run.status == "failed"
    assert "does not divide" in run.error_message
    assert run.error_traceback.splitlines()[-1].startswith("ValueError")


def test_process_dying_without_end_event_marks_run_interrupted(tmp_path):
    manager = RunManager(tmp_path, target=fake_dying_trainer)
    run = wait_until_ended(manager, manager.start(CONFIG).run_id)
    assert run.status == "interrupted"  # the one rule: no `end` and no live owner
    assert "exited with code 3" in run.error_message
    assert RunManager(tmp_path).get(run.run_id).status == "interrupted"  # a later studio agrees
    # The manager keeps serving: another run starts and finishes.
    manager._target = fake_trainer
    assert wait_until_ended(manager, manager.start(CONFIG).run_id).status == "finished"


@pytest.mark.skipif(TRAINER_START_METHOD != "forkserver", reason="no fork server on this platform")
def test_a_trainer_starts_from_the_fork_server_with_the_trainer_already_imported(tmp_path):
    """What makes Start quick (benchmarks/run_start.py): the trainer's process comes from the fork
    server, which imported the trainer (torch and all) once, not from a fresh interpreter; its
    creator is still this process, whose death stops it (tests/test_studio_kill.py)."""
    manager = RunManager(tmp_path, target=report_start)
    run_id = manager.start(CONFIG).run_id
    wait_until_ended(manager, run_id)
    found = json.loads((tmp_path / run_id / "start.json").read_text())
    assert found["preloaded"] == TRAINER_PRELOAD
    assert "multiprocessing.forkserver" in found["os_parent"]
    assert found["creator"] == os.getpid()


def test_one_run_more_than_the_limit_is_refused_with_the_reason(tmp_path):
    manager = RunManager(tmp_path, max_concurrent_runs=1, target=fake_endless_trainer)
    first = manager.start(CONFIG)
    with pytest.raises(RunLimitError, match="allows 1 at a time"):
        manager.start(CONFIG)
    manager.stop(first.run_id)
    wait_until_ended(manager, first.run_id)
    second = manager.start(CONFIG)  # the freed slot is usable again
    assert second.run_id != first.run_id
    manager.shutdown(timeout=10)
    assert manager.get(second.run_id).status == "stopped"


def test_new_manager_rebuilds_history_from_the_runs_folder(tmp_path):
    manager = RunManager(tmp_path, target=fake_trainer)
    finished = wait_until_ended(manager, manager.start(CONFIG).run_id)

    restarted = RunManager(tmp_path)
    runs = restarted.list_runs()
    assert [r.run_id for r in runs] == [finished.run_id]
    rebuilt = runs[0]
    assert rebuilt.status == "finished"
    assert [m["step"] for m in rebuilt.metrics] == [m["step"] for m in finished.metrics]
    assert rebuilt.final_model == finished.final_model
    assert rebuilt.env_name == "cartpole" and rebuilt.model_type == "ppo-small"
    assert rebuilt.wall_seconds > 0


def test_run_without_end_event_is_listed_as_interrupted(tmp_path):
    run_dir = tmp_path / "cartpole-ppo-small-20240101-000000"
    run_dir.mkdir()
    old = time.time() - 3600
    events = [
        {
            "type": "start",
            "time": old,
            "run_id": run_dir.name,
            "config": CONFIG,
            "device": "cpu",
            "total_timesteps": 1000,
            "resumed_from_step": None,
        },
        {"type": "metrics", "time": old + 1, "step": 100, "episode_return_mean": 12.0},
    ]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(e) for e in events) + '\n{"type": "met')
    run = RunManager(tmp_path).get(run_dir.name)
    assert run.status == "interrupted"
    assert run.step == 100 and len(run.metrics) == 1  # the torn last line is skipped
    assert "Resume" in run.error_message


def test_resume_continues_from_the_last_checkpoint_without_duplicate_steps(tmp_path):
    manager = RunManager(tmp_path, target=fake_endless_trainer)
    state = manager.start(CONFIG)
    wait_for(lambda: manager.get(state.run_id).step >= 700)
    manager.stop(state.run_id)
    stopped = wait_until_ended(manager, state.run_id)
    last_checkpoint_step = int(Path(stopped.latest_checkpoint).stem.split("_")[1])

    manager._target = fake_trainer
    manager.resume(state.run_id)
    resumed = wait_until_ended(manager, state.run_id)
    steps = [m["step"] for m in resumed.metrics]
    assert resumed.status == "finished"
    assert steps == sorted(set(steps)), "a step appears twice"
    assert steps[-1] == last_checkpoint_step + 1000
    # The rebuilt history agrees with the live one.
    assert [m["step"] for m in RunManager(tmp_path).get(state.run_id).metrics] == steps

    with pytest.raises(RunError, match="only stopped, failed or interrupted"):
        manager.resume(state.run_id)


def test_a_run_that_died_before_its_first_checkpoint_resumes_from_step_0_in_place(tmp_path):
    first = RunManager(tmp_path, target=fake_failing_trainer)
    dead = wait_until_ended(first, first.start(CONFIG).run_id)
    assert dead.status == "failed" and dead.latest_checkpoint is None
    manager = RunManager(tmp_path)  # the real trainer
    manager.resume(dead.run_id)
    run = wait_until_ended(manager, dead.run_id)
    assert run.status == "finished", run.error_message
    assert run.step >= CONFIG["total_timesteps"] and run.final_model
    steps = [m["step"] for m in run.metrics]
    assert steps == sorted(set(steps)) and steps[0] > 0
    assert any("training it again from step 0" in line for line in run.log_tail)


def test_delete_removes_the_run_folder(tmp_path):
    manager = RunManager(tmp_path, target=fake_trainer)
    run = wait_until_ended(manager, manager.start(CONFIG).run_id)
    manager.delete(run.run_id)
    assert not (tmp_path / run.run_id).exists()
    assert manager.list_runs() == []
    with pytest.raises(UnknownRunError):
        manager.get(run.run_id)


@pytest.mark.parametrize("bad_id", ["", "..", ".", "../etc", "a/b", "/etc/passwd", "x\\y", "run id", None])
def test_run_ids_cannot_escape_the_runs_folder(tmp_path, bad_id):
    manager = RunManager(tmp_path)
    with pytest.raises(RunError):
        manager.run_dir(bad_id)
    with pytest.raises(RunError):
        manager.delete(bad_id)
    with pytest.raises(RunError):
        validate_run_id(bad_id)


def test_only_files_inside_the_runs_folder_are_served(tmp_path):
    runs_dir = tmp_path / "runs"
    (runs_dir / "r1").mkdir(parents=True)
    inside = runs_dir / "r1" / "model.pth"
    inside.write_bytes(b"x")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (runs_dir / "r1" / "link.txt").symlink_to(outside)
    assert safe_run_file(runs_dir, inside) == str(inside.resolve())
    assert safe_run_file(runs_dir, "/etc/passwd") is None
    assert safe_run_file(runs_dir, runs_dir / "r1" / ".." / ".." / "secret.txt") is None
    assert safe_run_file(runs_dir, runs_dir / "r1" / "link.txt") is None
    assert safe_run_file(runs_dir, runs_dir / "r1" / "missing.pth") is None


# ----------------------------------------------------------------------------- one status rule, owners


def sleeping_owner(run_dir: Path):
    """A live process of this host written into owner.json, as a CLI trainer would have."""
    import socket
    import subprocess
    import sys

    import psutil

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    owner = RunOwner(
        pid=process.pid,
        host=socket.gethostname(),
        started_at=time.time(),
        process_started=psutil.Process(process.pid).create_time(),
    )
    (run_dir / "owner.json").write_text(json.dumps(owner.__dict__))
    return process


def test_a_run_started_here_and_the_same_run_found_on_disk_get_the_same_status(tmp_path):
    here = RunManager(tmp_path, target=fake_endless_trainer)
    run_id = here.start(CONFIG).run_id
    elsewhere = RunManager(tmp_path)  # another studio on the same folder: finds the run on disk
    wait_for(lambda: len(here.get(run_id).metrics) >= 2)
    assert here.get(run_id).status == elsewhere.get(run_id).status == "running"
    here.stop(run_id)
    assert wait_until_ended(here, run_id).status == elsewhere.get(run_id).status == "stopped"

    dying = RunManager(tmp_path, target=fake_dying_trainer)
    dead_id = dying.start(CONFIG).run_id
    assert wait_until_ended(dying, dead_id).status == "interrupted"
    assert RunManager(tmp_path).get(dead_id).status == "interrupted"  # its owner.json names a dead process
    assert {run.run_id: run.status for run in elsewhere.list_runs()} == {run_id: "stopped", dead_id: "interrupted"}


def test_a_run_whose_owner_is_alive_is_running_and_not_resumable(tmp_path):
    manager = RunManager(tmp_path, target=fake_trainer)
    run_id = manager.start(CONFIG).run_id
    wait_until_ended(manager, run_id)
    run_dir = tmp_path / run_id
    # As if a CLI trainer had resumed it: a live owner and a new segment without an end yet.
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as history:
        history.write(
            json.dumps(
                {
                    "type": "start",
                    "time": time.time(),
                    "run_id": run_id,
                    "config": CONFIG,
                    "device": "cpu",
                    "total_timesteps": 2000,
                    "resumed_from_step": 1000,
                }
            )
            + "\n"
        )
    owner = sleeping_owner(run_dir)
    try:
        assert manager.get(run_id).status == RunManager(tmp_path).get(run_id).status == "running"
        with pytest.raises(RunError, match=f"being trained by process {owner.pid} on host"):
            manager.resume(run_id)
        with pytest.raises(RunError, match="running"):
            manager.delete(run_id)
        with pytest.raises(RunError, match=f"process {owner.pid}.*stop it there"):
            manager.stop(run_id)
    finally:
        owner.kill()
        owner.wait()
    assert manager.get(run_id).status == "interrupted"  # its owner is gone: resumable now
    manager.resume(run_id)
    resumed = wait_until_ended(manager, run_id)
    assert resumed.status == "finished" and resumed.metrics[-1]["step"] == 2000


def test_a_100k_update_run_keeps_a_bounded_curve_with_its_shape(tmp_path):
    import math

    from studio.history import MAX_METRIC_POINTS, RunState

    state = RunState(run_id="long", run_dir=tmp_path)
    returns = [100 * math.sin(update / 9000) for update in range(100_000)]  # peak near update 14_137
    for update, value in enumerate(returns):
        state.apply({"type": "metrics", "step": 64 * (update + 1), "episode_return_mean": value, "time": 1.0})
        assert len(state.metrics) <= MAX_METRIC_POINTS + 1
    run = state.snapshot()
    steps = [m["step"] for m in run.metrics]
    assert len(steps) > MAX_METRIC_POINTS // 2 and steps == sorted(set(steps))
    assert steps[0] == 64 and steps[-1] == 64 * 100_000  # first and last exact
    assert run.update_count == 100_000 and run.best_return == max(returns)
    kept_max = max(m["episode_return_mean"] for m in run.metrics)
    assert kept_max > max(returns) - 0.1  # the peak survives the thinning
