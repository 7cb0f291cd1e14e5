"""Actors and a learner (issue 24), the commands as a user runs them, each process in its own
session, killed with its children and bounded by a timeout: a late actor joins a running learner
and a wrong token is refused; (slow) two local actors learn CartPole past 475 and one killed with
SIGKILL mid-run does not stop the run; a learner killed mid-run is restarted from its checkpoint
and the actors reconnect; an actor in another network namespace feeds the learner. A run that
ends well ends once: its learner exits 0 (no "Learner lost" at the end), no actor is dropped and
no update is counted twice. The transport in one process: tests/test_actor_learner.py."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from test_cluster import TOKEN, Agent, two_namespaces  # noqa: F401 (a fixture)
from trainer.cluster.admission import new_token
from trainer.cluster.launch import free_port
from trainer.cluster.nodes import read_nodes

APPO = ["--set", "algo=appo", "--set", "num_envs=32", "--set", "num_steps=32", "--set", "log_interval=1"]
QUIET = ["--set", "gif_interval=0", "--set", "device=cpu"]


def _train(tmp_path, name: str, *args: str) -> Agent:
    return Agent(
        tmp_path / f"{name}.log",
        ["--config", "configs/cartpole.yaml", *APPO, *QUIET, "--runs-dir", str(tmp_path / "runs"), *args],
    )


def _master(tmp_path, port: int, *args: str, host: str = "127.0.0.1", prefix=()) -> Agent:
    return Agent(
        tmp_path / "master.log",
        [
            "master",
            "--config",
            "configs/cartpole.yaml",
            "--host",
            host,
            "--port",
            str(port),
            "--token",
            TOKEN,
            "--runs-dir",
            str(tmp_path / "runs"),
            *APPO,
            *QUIET,
            *args,
        ],
        prefix,
    )


def _actor(tmp_path, port: int, name: str, token: str = TOKEN, host: str = "127.0.0.1", prefix=()) -> Agent:
    return Agent(
        tmp_path / f"{name}.log", ["worker", "--master", f"{host}:{port}", "--role", "actor", "--token", token], prefix
    )


def _run_dir(tmp_path) -> Path:
    (run_dir,) = list((tmp_path / "runs").iterdir())
    return run_dir


def _metrics(run_dir: Path) -> list[dict]:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [event for event in events if event["type"] == "metrics"]


def _ends_once_at(run_dir: Path, total: int) -> list[dict]:
    metrics = _metrics(run_dir)
    steps = [event["step"] for event in metrics]
    assert steps[-1] == total and steps == sorted(set(steps)), steps[-5:]  # no update counted twice
    return metrics


def _run_lines(output: str) -> str:
    """The lines of a run's output about its learner and actors (for a failure's message)."""
    return "\n".join(line for line in output.splitlines() if re.search(r"Actor|Learner|resumed|generation", line))


def _ended_well(output: str, learner_losses: int = 0) -> None:
    """The learner exited 0 at the end (a crash there reads "Learner lost" and a restart), and no
    actor was dropped for a bad batch (a resumed learner's weights' version among them)."""
    assert output.count("Learner lost") == learner_losses, _run_lines(output)
    assert "Actor dropped" not in output, _run_lines(output)


def _learned_with_two_actors(tmp_path) -> bool:
    """An update learned while 2 actors were connected, with a recent return past random play's."""
    try:
        metrics = _metrics(_run_dir(tmp_path))
    except (ValueError, OSError):  # no run folder yet, or a line being written
        return False
    return any(event["actors"] == 2 for event in metrics) and metrics[-1]["recent_return_mean"] > 60


def test_a_late_actor_joins_a_running_learner_and_a_wrong_token_is_refused(tmp_path):
    """A master with one local actor on a run too long to end by itself; an actor with the wrong
    token is refused; a second actor joins from another process while it learns, and the learner
    learns with both (random play returns about 22). Ctrl-C of the master ends the run and both
    actors with it, each update counted once."""
    port = free_port()
    master = _master(
        tmp_path, port, "--actors", "1", "--set", "total_timesteps=100000000", "--store-port", str(free_port())
    )
    master.wait_for(r"Actor connected: #1 at", 120)
    intruder = _actor(tmp_path, port, "intruder", token=new_token())
    assert "wrong token" in intruder.finish(60) and intruder.process.returncode == 2
    late = _actor(tmp_path, port, "late")
    master.wait_for(lambda output: _learned_with_two_actors(tmp_path), 240)
    master.process.send_signal(signal.SIGINT)
    output = master.finish(120)
    late_output = late.finish(60)
    assert master.process.returncode == 130 and late.process.returncode == 0, output[-3000:] + late_output[-2000:]
    assert "Actor connected: #2 to the learner (generation 1)" in late_output
    assert "Actor 2: the run has finished" in late_output
    assert re.search(r"Actor connected: #2 at 127\.0\.0\.1 \(.*\); 2 actors", output), output[-3000:]
    assert "Worker refused: 127.0.0.1 (wrong token)" in output
    _ended_well(output)
    steps = [event["step"] for event in _metrics(_run_dir(tmp_path))]
    assert steps == sorted(set(steps)), steps[-5:]  # no update counted twice
    table = read_nodes(_run_dir(tmp_path))
    assert sorted(row["actor"] for row in table["nodes"]) == [1, 2] and table["finished"]


def test_ctrl_c_of_a_master_whose_learner_waits_for_actors_stops_the_run(tmp_path):
    """No actor ever joins: the learner waits for its first batch. Ctrl-C of the master stops it
    there like any stop: status stopped at step 0, no error, the master's resume hint, exit 130."""
    master = _master(tmp_path, free_port(), "--store-port", str(free_port()))
    master.wait_for(r"Run \S+: appo", 120)  # the learner's start line: it now waits in take()
    master.process.send_signal(signal.SIGINT)
    output = master.finish(60)
    assert master.process.returncode == 130, output[-3000:]
    assert "master: stopped by SIGINT; continue with" in output and "Traceback" not in output, output[-3000:]
    _ended_well(output)
    events = [json.loads(line) for line in (_run_dir(tmp_path) / "metrics.jsonl").read_text().splitlines()]
    assert not [event for event in events if event["type"] in ("error", "metrics")], events
    assert events[-1]["type"] == "end" and events[-1]["status"] == "stopped" and events[-1]["step"] == 0


@pytest.mark.slow
def test_two_local_actors_learn_cartpole_and_a_killed_actor_does_not_stop_the_run(tmp_path):
    """python -m trainer --actors 2 learns CartPole past 475; one actor killed with SIGKILL
    mid-run is lost, the learner goes on with the other, and the run ends at its last step."""
    run = _train(tmp_path, "learner", "--actors", "2", "--set", "total_timesteps=300000")
    run.wait_for(lambda text: re.search(r"\[STEP (\d{5,})\]", text) and "2 actors" in text, 240)
    actors = _local_actors(run, _run_dir(tmp_path))
    assert len(actors) == 2, actors
    actors[-1].send_signal(signal.SIGKILL)
    run.wait_for(r"Actor lost: #\d at 127\.0\.0\.1 \(.*\); 1 actors", 120)
    output = run.finish(600)
    assert run.process.returncode == 0, output[-3000:]
    _ended_well(output)
    metrics = _ends_once_at(_run_dir(tmp_path), 300032)
    assert metrics[-1]["recent_return_mean"] >= 475, [event["recent_return_mean"] for event in metrics[-5:]]
    assert metrics[-1]["actors"] == 1
    rows = read_nodes(_run_dir(tmp_path))["nodes"]
    assert sorted(row["lost"] for row in rows) == [False, True]


def _local_actors(run: Agent, run_dir: Path) -> list:
    """The master's actor processes: its spawned children but the learner (which owns the run folder)."""
    import psutil

    from trainer.run.owner import read_owner

    learner = read_owner(run_dir).pid
    children = psutil.Process(run.process.pid).children()
    return [child for child in children if child.pid != learner and "spawn_main" in " ".join(child.cmdline())]


@pytest.mark.slow
def test_a_killed_learner_is_restarted_from_its_checkpoint_and_the_actors_reconnect(tmp_path):
    from trainer.run.owner import read_owner

    run = _train(
        tmp_path, "learner", "--actors", "2", "--set", "total_timesteps=30720", "--set", "checkpoint.interval=5"
    )
    run.wait_for(r"Checkpoint at step", 240)
    os.kill(read_owner(_run_dir(tmp_path)).pid, signal.SIGKILL)
    output = run.finish(400)
    assert run.process.returncode == 0, output[-3000:]
    assert "Learner lost (exit code -9): restarting it from its newest checkpoint (restart 1 of 3)" in output
    assert re.search(r"resumed from .*ckpt_\d+\.pth at step", output), _run_lines(output)
    _ended_well(output, learner_losses=1)
    assert output.count("to the learner (generation 2)") == 2, _run_lines(output)  # both actors came back
    _ends_once_at(_run_dir(tmp_path), 30720)


@pytest.mark.slow
def test_an_actor_in_another_network_namespace_feeds_the_learner_over_a_veth_pair(tmp_path, two_namespaces):  # noqa: F811
    (in_master, in_actor), (master_address, actor_address) = two_namespaces
    master = _master(tmp_path, 54321, "--set", "total_timesteps=10240", host=master_address, prefix=in_master)
    master.wait_for("Learner's master listening", 120)
    actor = _actor(tmp_path, 54321, "actor", host=master_address, prefix=in_actor)
    actor_output = actor.finish(300)
    output = master.finish(120)
    assert master.process.returncode == 0 and actor.process.returncode == 0, output[-3000:] + actor_output[-2000:]
    assert re.search(rf"Actor connected: #1 at {re.escape(actor_address)} ", output), output[-3000:]
    _ended_well(output)
    _ends_once_at(_run_dir(tmp_path), 10240)
