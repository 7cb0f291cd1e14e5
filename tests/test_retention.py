"""Retention and disk: the best checkpoint survives pruning, old checkpoints can be deleted from
a run that is not training, a run's size on disk, and Start refuses on a nearly full disk."""

import json
from pathlib import Path

import pytest

from trainer.config.validation import config_from_dict
from trainer.run.checkpoint import load_model
from trainer.run.layout import BEST_FILE, checkpoint_path, list_checkpoints, write_config
from trainer.run.loop import train
from trainer.run.owner import RunOwnedError, take_ownership
from trainer.run.retention import (
    delete_old_checkpoints,
    prune_checkpoints,
    read_best_checkpoint,
    record_checkpoint_return,
    run_size_bytes,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS_PER_UPDATE = 8 * 16
# The return each update reports: it peaks at update 3, then falls (a policy that collapses).
SCRIPTED_RETURNS = [1.0, 4.0, 9.0, 5.0, 3.0, 2.0]


def tiny_config(**overrides):
    raw = {
        "env_name": "cartpole",
        "num_envs": 8,
        "num_steps": 16,
        "mini_batch_size": 64,
        "update_epochs": 1,
        "total_timesteps": STEPS_PER_UPDATE * len(SCRIPTED_RETURNS),
        "gif_interval": 0,
        "seed": 1,
        "device": "cpu",
        "checkpoint": {"interval": 1, "keep": 2},
    }
    raw.update(overrides)
    return config_from_dict(raw)


class ScriptedReturns:
    """A sink that makes update n report SCRIPTED_RETURNS[n-1] as its recent_return_mean; it runs
    first, so the trainer itself (which reads its own metrics event) sees the scripted curve."""

    def __call__(self, event: dict) -> None:
        if event["type"] == "metrics":
            event["recent_return_mean"] = SCRIPTED_RETURNS[event["update"] - 1]

    def close(self) -> None:
        pass


def steps(folder: Path) -> list[int]:
    return [step for step, _ in list_checkpoints(folder)]


def test_the_best_checkpoint_survives_pruning_and_loads(tmp_path):
    train(tiny_config(), tmp_path / "run", sinks=[ScriptedReturns()])
    folder = tmp_path / "run" / "checkpoints"
    best_step = 3 * STEPS_PER_UPDATE
    # keep 2: the newest two (updates 5 and 6), and the peak at update 3 however old
    assert steps(folder) == [best_step, 5 * STEPS_PER_UPDATE, 6 * STEPS_PER_UPDATE]
    assert json.loads((folder / BEST_FILE).read_text()) == {"step": best_step, "recent_return_mean": 9.0}
    model = load_model(checkpoint_path(folder, best_step))
    assert model.global_step == best_step
    action, _ = model.predict([0.0, 0.0, 0.0, 0.0])
    assert int(action) in (0, 1)

    # Resume continues from the newest checkpoint, not from the best one.
    longer = tiny_config(total_timesteps=STEPS_PER_UPDATE * 7)
    lines = []
    train(
        longer,
        tmp_path / "run",
        resume=True,
        sinks=[lambda event: lines.append(event.get("message", "")) if event["type"] == "log" else None],
    )
    assert any(f"ckpt_{6 * STEPS_PER_UPDATE}.pth" in line and "resumed from" in line for line in lines), lines


def test_keep_best_off_keeps_only_the_newest_k(tmp_path):
    train(
        tiny_config(checkpoint={"interval": 1, "keep": 2, "keep_best": False}),
        tmp_path / "run",
        sinks=[ScriptedReturns()],
    )
    folder = tmp_path / "run" / "checkpoints"
    assert steps(folder) == [5 * STEPS_PER_UPDATE, 6 * STEPS_PER_UPDATE]
    assert not (folder / BEST_FILE).exists()


def fake_checkpoints(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for step in range(1, count + 1):
        checkpoint_path(folder, step * 100).write_bytes(b"x" * 1000)


def test_ties_go_to_the_newer_checkpoint_and_a_missing_return_never_wins(tmp_path):
    fake_checkpoints(tmp_path, 4)
    assert record_checkpoint_return(tmp_path, 100, 5.0)
    assert not record_checkpoint_return(tmp_path, 200, None)
    assert not record_checkpoint_return(tmp_path, 200, float("nan"))
    assert not record_checkpoint_return(tmp_path, 300, 4.9)
    assert record_checkpoint_return(tmp_path, 400, 5.0)
    assert read_best_checkpoint(tmp_path).step == 400
    # the best's file gone (deleted by hand): best.json no longer counts, the next one is best
    checkpoint_path(tmp_path, 400).unlink()
    assert read_best_checkpoint(tmp_path) is None
    assert record_checkpoint_return(tmp_path, 300, 1.0)


def test_prune_keeps_k_and_the_best_and_never_the_newest_alone(tmp_path):
    fake_checkpoints(tmp_path, 6)
    record_checkpoint_return(tmp_path, 200, 10.0)
    deleted = prune_checkpoints(tmp_path, keep=2)
    assert sorted(path.name for path in deleted) == ["ckpt_100.pth", "ckpt_300.pth", "ckpt_400.pth"]
    assert steps(tmp_path) == [200, 500, 600]
    prune_checkpoints(tmp_path, keep=1, keep_best=False)
    assert steps(tmp_path) == [600]


def test_delete_old_checkpoints_is_refused_while_the_run_trains_then_keeps_newest_and_best(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_config(run, tiny_config())
    fake_checkpoints(run / "checkpoints", 5)
    record_checkpoint_return(run / "checkpoints", 200, 3.0)
    owner = take_ownership(run)  # this (live) process trains in it
    with pytest.raises(RunOwnedError, match="stop the run before deleting its old checkpoints"):
        delete_old_checkpoints(run)
    assert steps(run / "checkpoints") == [100, 200, 300, 400, 500]
    owner.release(run)
    deleted = delete_old_checkpoints(run)
    assert len(deleted) == 3 and steps(run / "checkpoints") == [200, 500]


def test_run_size_counts_every_file_and_a_checkpoint_folder_outside(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    outside = tmp_path / "elsewhere"
    write_config(run, tiny_config(checkpoint={"path": str(outside)}))
    (run / "rollouts").mkdir()
    (run / "rollouts" / "step_1.gif").write_bytes(b"g" * 5000)
    fake_checkpoints(outside, 3)
    expected = (run / "config.yaml").stat().st_size + 5000 + 3 * 1000
    assert run_size_bytes(run) == expected
    assert run_size_bytes(tmp_path / "missing") == 0


# ----------------------------------------------------------------------------- the studio


def finished_run(runs: Path, name: str = "cartpole-ppo-1") -> Path:
    run = runs / name
    run.mkdir(parents=True)
    write_config(run, tiny_config())
    fake_checkpoints(run / "checkpoints", 4)
    record_checkpoint_return(run / "checkpoints", 200, 7.5)
    return run


def test_the_runs_tab_deletes_old_checkpoints_after_saying_what_goes_and_what_stays(tmp_path):
    from studio.retention import cleanup_preview
    from studio.runs import RunManager

    manager = RunManager(tmp_path)
    run = finished_run(tmp_path)
    message, possible = cleanup_preview(manager, run.name)
    assert possible and "Delete 2 old checkpoint(s)" in message
    assert "newest (step 400)" in message and "best (step 200, return 7.50)" in message
    size_before = run_size_bytes(run)
    assert len(manager.delete_old_checkpoints(run.name)) == 2
    assert steps(run / "checkpoints") == [200, 400]
    assert run_size_bytes(run) == size_before - 2 * 1000  # the table's disk column shrinks
    message, possible = cleanup_preview(manager, run.name)
    assert not possible and "no old checkpoints" in message


def test_the_runs_tab_refuses_to_delete_checkpoints_while_the_run_trains(tmp_path):
    from studio.runs import RunError, RunManager

    manager = RunManager(tmp_path)
    run = finished_run(tmp_path)
    owner = take_ownership(run)  # a trainer (this process) still lives in the folder
    try:
        with pytest.raises(RunError, match="stop the run before deleting its old checkpoints"):
            manager.delete_old_checkpoints(run.name)
    finally:
        owner.release(run)
    assert steps(run / "checkpoints") == [100, 200, 300, 400]


def test_start_refuses_when_the_runs_disk_is_nearly_full(tmp_path, monkeypatch):
    import shutil

    from studio.runs import RunError, RunManager

    manager = RunManager(tmp_path / "runs")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=20 * 2**20))
    with pytest.raises(RunError, match=r"only 20 MiB free on its disk, a run needs at least 100 MiB"):
        manager.start(tiny_config().to_dict())
    assert list((tmp_path / "runs").iterdir()) == []  # no run folder was created


# ----------------------------------------------------------------------------- the rank label


@pytest.mark.parametrize("rank", [None, "3"])
def test_trainer_metrics_carry_the_rank_of_the_process_serving_them(monkeypatch, rank):
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from trainer.run.events import make_event
    from trainer.serving.metrics_export import MetricsSink, RunsCollector

    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    sink = MetricsSink()
    sink(
        make_event(
            "start",
            run_id="r1",
            config={"env_name": "cartpole", "model_type": "ppo-small"},
            device="cpu",
            total_timesteps=1000,
            resumed_from_step=None,
        )
    )
    registry = CollectorRegistry()
    registry.register(RunsCollector(lambda: [sink.sample()], gpus=lambda: []))
    text = generate_latest(registry).decode()
    expected = rank or "0"
    assert (
        f'rlstudio_return_falling_threshold{{env="cartpole",model="ppo-small",rank="{expected}",run_id="r1"}}' in text
    )
