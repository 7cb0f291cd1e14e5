"""The run queue (trainer/run/run_queue.py): the studio and the sweep runner start at most `slots`
runs at once in a runs folder, the rest wait as "queued" with their place, a killed holder's slot
comes back, and a queued studio run outlives its studio. Counted on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from studio.runs import RunManager
from studio.views import runs_table_rows, status_html
from test_studio_runs import CONFIG, fake_endless_trainer, fake_trainer, wait_for
from trainer.config.defaults import config_from_dict
from trainer.run.layout import queue_path
from trainer.run.run_queue import RunQueue, resolve_slots
from trainer.run.status import queued_text

ROOT = Path(__file__).resolve().parents[1]
TINY = {  # a real CartPole run of a few updates
    "env_name": "cartpole",
    "total_timesteps": 1024,
    "num_envs": 8,
    "num_steps": 64,
    "mini_batch_size": 128,
    "gif_interval": 0,
    "log_interval": 1,
}
RUN_SECONDS = 240  # bound on a few tiny runs one after another on a loaded 2-core machine (a hang fails)


class ProcessSampler:
    """Counts, every few milliseconds until stopped, the live (not zombie) processes `find` names;
    `most` is the largest count seen."""

    def __init__(self, find):
        self.find, self.most, self.samples = find, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            alive = 0
            for process in self.find():
                try:
                    alive += process.status() != psutil.STATUS_ZOMBIE
                except psutil.Error:
                    pass
            self.most, self.samples = max(self.most, alive), self.samples + 1
            time.sleep(0.02)


def trainers_of(parent: psutil.Process):
    """The trainer processes under `parent`: the children of its multiprocessing fork server(s)."""

    def find():
        try:
            children = parent.children(recursive=True)
        except psutil.Error:
            return []
        found = []
        for child in children:
            try:
                if "forkserver" in " ".join(child.cmdline()):
                    found += child.children()
            except psutil.Error:
                continue
        return found

    return find


def stop_all(manager: RunManager) -> None:
    manager.shutdown(timeout=10)


# ----------------------------------------------------------------------------- the queue itself


def test_a_killed_holder_gives_its_slot_back_and_the_line_is_first_come_first_served(tmp_path):
    queue = RunQueue(tmp_path, slots=1)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first = queue.join("first")
        assert queue.admit(first) is True
        queue.hand_over(first, [holder.pid])  # the slot lives with that process now
        second, third = queue.join("second"), queue.join("third")
        assert queue.admit(third) is False and queue.admit(second) is False  # the slot is taken
        assert (queue.place(second), queue.place(third)) == (1, 2)
        holder.kill()
        holder.wait()
        assert queue.admit(third) is False  # second is ahead of it
        assert queue.admit(second) is True  # the dead holder's slot came back
        assert queue.place(third) == 1 and queue.busy() == 1
        queue.release(second)
        assert queue.admit(third) is True
    finally:
        holder.kill()
        holder.wait()


def test_a_studio_run_in_line_outlives_its_studio_and_keeps_its_place(tmp_path):
    run_dir = tmp_path / "cartpole-ppo-small-20260101-000000"
    run_dir.mkdir()
    code = (
        "from trainer.run.run_queue import STUDIO, RunQueue; "
        f"RunQueue({str(tmp_path)!r}, slots=1).join('studio run', kind=STUDIO, run_dir={str(run_dir)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    queue = RunQueue(tmp_path, slots=1)
    later = queue.join("a sweep's trial")
    assert queue.place(later) == 1  # the dead studio's run waits out of line for the next studio
    adopted = queue.adopt()
    assert [entry.run_dir for entry in adopted] == [str(run_dir.resolve())]
    assert (queue.place(adopted[0].id), queue.place(later)) == (1, 2)  # back at its old place


def test_slots_must_be_a_positive_whole_number_and_the_place_reads_as_words():
    for bad in (0, -2, 1.5, "2"):
        with pytest.raises(ValueError, match="slots must be a whole number of at least 1"):
            resolve_slots(bad)
    assert resolve_slots(None) >= 1  # the machine's usable cores (or GPUs)
    assert [queued_text(place) for place in (1, 2, 3, 4, 11, 22)] == [
        "queued, 1st in line",
        "queued, 2nd in line",
        "queued, 3rd in line",
        "queued, 4th in line",
        "queued, 11th in line",
        "queued, 22nd in line",
    ]


# ----------------------------------------------------------------------------- the studio


def test_the_studio_never_trains_more_runs_than_its_slots_and_all_finish(tmp_path):
    """Four real CartPole runs on 2 slots: never more than 2 trainers alive, the others queued
    with their place, and every run finishes on its own."""
    config = config_from_dict(TINY).to_dict()
    manager = RunManager(tmp_path, slots=2, max_concurrent_runs=8)
    try:
        with ProcessSampler(trainers_of(psutil.Process())) as sampler:
            run_ids = [manager.start(config).run_id for _ in range(4)]
            waiting = [manager.get(run_id) for run_id in run_ids[2:]]
            assert [run.status_text for run in waiting] == ["queued, 1st in line", "queued, 2nd in line"]
            wait_for(lambda: all(manager.get(run_id).status == "finished" for run_id in run_ids), timeout=RUN_SECONDS)
        assert sampler.samples > 10 and sampler.most == 2
    finally:
        stop_all(manager)


def test_a_queued_run_shows_its_place_and_survives_a_studio_restart(tmp_path):
    manager = RunManager(tmp_path, slots=1, target=fake_endless_trainer, max_concurrent_runs=8)
    running = manager.start(CONFIG).run_id
    second, third = manager.start(CONFIG).run_id, manager.start(CONFIG).run_id
    runs = {run.run_id: run for run in manager.list_runs()}
    assert runs[running].status == "running" or runs[running].status == "starting"
    assert runs[second].status == runs[third].status == "queued" and runs[third].is_active
    rows = {row[0]: row[1] for row in runs_table_rows(list(runs.values()))}  # the Runs table's status column
    assert rows[second] == "queued, 1st in line" and rows[third] == "queued, 2nd in line"
    assert "queued, 2nd in line" in status_html(runs[third])
    manager.shutdown(timeout=10)  # the running one stops; the queued ones stay in the queue file
    assert manager.get(running).status == "stopped"

    restarted = RunManager(tmp_path, slots=1, target=fake_trainer, max_concurrent_runs=8)
    try:
        assert restarted.get(third).status in ("queued", "starting", "running", "finished")
        wait_for(lambda: all(restarted.get(run_id).status == "finished" for run_id in (second, third)), timeout=60)
        assert restarted.get(second).started_at <= restarted.get(third).started_at  # in line order
        wait_for(lambda: restarted.active_count() == 0)
        assert restarted.queue.entries() == []  # every slot given back
    finally:
        stop_all(restarted)


def test_stopping_a_queued_run_takes_it_out_of_line_and_a_resume_queues_it_again(tmp_path):
    manager = RunManager(tmp_path, slots=1, target=fake_endless_trainer, max_concurrent_runs=8)
    try:
        running = manager.start(CONFIG).run_id
        queued = manager.start(CONFIG).run_id
        behind = manager.start(CONFIG).run_id
        assert manager.get(behind).status_text == "queued, 2nd in line"
        stopped = manager.stop(queued)
        assert stopped.status == "stopped" and stopped.step == 0
        assert manager.get(behind).status_text == "queued, 1st in line"
        assert [entry.run_dir for entry in manager.queue.entries() if entry.state == "waiting"] == [
            str((tmp_path / behind).resolve())
        ]
        manager.resume(queued)  # it never trained: back in line, behind the other
        assert manager.get(queued).status_text == "queued, 2nd in line"
        manager.stop(running)
        wait_for(lambda: manager.get(behind).status == "running")
        assert manager.get(queued).status_text == "queued, 1st in line"
    finally:
        stop_all(manager)
    assert queue_path(tmp_path).is_file()


# ----------------------------------------------------------------------------- the sweep runner


SWEEP = """base: cartpole.yaml
objective: {metric: recent_return_mean, direction: maximize}
budget: {total_timesteps: 1024}
space:
  learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}
  num_envs: {choices: [8]}
pruner: {name: none}
sampler: {name: random, seed: 0}
"""


def test_a_sweep_with_more_jobs_than_slots_never_trains_more_than_its_slots(tmp_path):
    pytest.importorskip("optuna")
    space = tmp_path / "tiny.yaml"
    space.write_text(SWEEP, encoding="utf-8")
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "trainer", "sweep", "--space", str(space), "--runs-dir", str(runs)]
    command += ["--trials", "2", "--jobs", "2", "--slots", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sweep = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with ProcessSampler(trainers_of(psutil.Process(sweep.pid))) as sampler:
            output, _ = sweep.communicate(timeout=RUN_SECONDS)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, output
    assert output.count("finished:") == 2, output
    assert "next trial queued, 1st in line: 1 of 1 slots taken" in output
    assert sampler.samples > 10 and sampler.most == 1
    assert RunQueue(runs, slots=1).entries() == []
