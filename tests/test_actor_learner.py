"""Actors and a learner (issue 24): the transport on loopback in one process (an actor's batches
reach the hub once each, in order; weights go back; a bad batch drops its actor; the queue drops
the oldest when full), then the commands as a user runs them: a learner with two local actors
learns CartPole, a late actor joins a running learner, a wrong token is refused, and (slow) an actor
killed with SIGKILL mid-run and a learner killed mid-run. Every process is bounded by a timeout."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from test_cluster import TOKEN, Agent, two_namespaces  # noqa: F401 (a fixture)
from trainer.algos.experience import ExperienceClosed
from trainer.cluster.actor import Actor
from trainer.cluster.actor_link import (
    HEADER_WORDS,
    MAGIC,
    REPLY_WORDS,
    TAG_BATCH,
    TAG_REPLY,
    flat_weights,
    open_pair,
    recv,
    send,
)
from trainer.cluster.admission import new_token
from trainer.cluster.launch import free_port
from trainer.cluster.learner_hub import LearnerHub
from trainer.cluster.nodes import read_nodes, run_key
from trainer.config.defaults import load_config

RUN_ID = "0123456789abcdef0123456789abcdef"
SMALL = ["num_envs=4", "num_steps=8", "num_minibatches=1", "gif_interval=0", "device=cpu", "learner_queue_batches=4"]


@pytest.fixture
def store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))


def _hub(store, tmp_path, config, generation=1) -> LearnerHub:
    store.add(run_key(RUN_ID, "learner/generation"), 1)  # what the master does before it starts a learner
    return LearnerHub(lambda: _client(store), RUN_ID, generation, config, tmp_path, "127.0.0.1:1").start()


def _client(store):
    """A connection of its own to the test's store (as every process and thread of a run has)."""
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=30))


def _actor_thread(store, config) -> tuple[Actor, threading.Thread]:
    actor = Actor(config, _client(store), RUN_ID, "127.0.0.1", say=lambda line: None)
    thread = threading.Thread(target=actor.run, daemon=True)
    thread.start()
    return actor, thread


def test_an_actors_batches_arrive_once_each_in_order_and_its_weights_follow_the_learner(store, tmp_path):
    config = load_config("configs/cartpole.yaml", SMALL)
    hub = _hub(store, tmp_path, config)
    actor, thread = _actor_thread(store, config)
    policy = _learner_policy(config)
    hub.publish(policy, 0)  # as the algorithm does before its first take()
    seen = []
    for version in range(1, 7):
        batch = hub.take()
        assert batch.rewards.shape == (8, 4) and batch.obs.shape == (8, 4, 4) and batch.actions.dtype == torch.int64
        assert 0 <= hub.version - batch.policy_version <= 2  # lag: what was sent, a batch or two ago
        seen.append(batch.sequence)
        with torch.no_grad():
            next(policy.parameters()).add_(0.01)  # "learned"
        hub.publish(policy, version)
    assert seen == sorted(seen) and len(set(seen)) == len(seen) and seen[0] == 1
    deadline = time.time() + 20
    while actor.version < 6 and time.time() < deadline:  # the actor's next reply carries version 6
        hub.take()
    assert actor.version == 6
    assert torch.equal(flat_weights(actor.policy), flat_weights(policy))
    store.set(run_key(RUN_ID, "finished"), "1")
    hub.close()
    thread.join(30)
    assert not thread.is_alive()
    table = read_nodes(tmp_path)
    (row,) = table["nodes"]
    assert row["role"] == "actor" and row["actor"] == actor.number and row["batches"] >= 7 and not row["lost"]
    assert table["learner"]["actors"] == 1 and table["finished"]
    assert any("Actor connected: #1" in line for line in table["log"])


def _learner_policy(config):
    from trainer.nets.build import build_policy
    from trainer.run.setup import config_env_factory, policy_spec

    env = config_env_factory(config)(config.num_envs, "cpu", 0)
    try:
        return build_policy(policy_spec(config, env))
    finally:
        env.close()


def _fake_actor(store, generation=1, actor=7):
    """An actor made by hand: announce, open the pair, read the first reply."""
    join = store.add(run_key(RUN_ID, f"gen/{generation}/joins"), 1)
    store.set(
        run_key(RUN_ID, f"gen/{generation}/join/{join}"), json.dumps({"actor": actor, "host": "h", "hostname": "fake"})
    )
    group = open_pair(store, run_key(RUN_ID, f"gen/{generation}/pair/{join}"), 1, timeout=10)
    return group


def _answer(group, hub) -> None:
    """The hub's reply, and the weights that follow it when it has newer ones."""
    answer = recv(group, torch.zeros(REPLY_WORDS, dtype=torch.int64), 0, TAG_REPLY)
    if answer[1] >= 0:
        recv(group, torch.empty(hub.weights[1].numel()), 0, TAG_REPLY)


def _send(group, hub, sequence: int, actor=7, poison: str | None = None) -> None:
    layout = hub.layout
    body = torch.zeros(layout.body_size(0))
    if poison == "nan":
        body[0] = math.nan
    if poison == "action":
        start = math.prod((layout.steps, layout.envs, *layout.obs_shape))
        body[start] = 5.0  # CartPole has actions 0 and 1
    header = torch.tensor([MAGIC, actor, sequence, 0, 0] + [0] * (HEADER_WORDS - 5), dtype=torch.int64)
    send(group, header, 0, TAG_BATCH)
    try:
        send(group, body, 0, TAG_BATCH)
    except RuntimeError:  # the learner hung up after a bad header
        pass


@pytest.mark.parametrize("poison, said", [("nan", "NaN"), ("action", "outside 0..1"), ("repeat", "sequence 1 after 1")])
def test_a_bad_batch_drops_its_actor_and_never_reaches_the_learner(store, tmp_path, poison, said):
    config = load_config("configs/cartpole.yaml", SMALL)
    hub = _hub(store, tmp_path, config)
    hub.publish(_learner_policy(config), 0)
    group = _fake_actor(store)
    _answer(group, hub)
    _send(group, hub, 1)
    _answer(group, hub)
    _send(group, hub, 1 if poison == "repeat" else 2, poison=None if poison == "repeat" else poison)
    deadline = time.time() + 10
    while not any("Actor dropped" in line for line in hub.lines) and time.time() < deadline:
        time.sleep(0.05)
    assert any("Actor dropped: #7" in line and said in line for line in hub.lines), hub.lines
    assert [hub.take().sequence] == [1] and len(hub.queue) == 0
    hub.should_stop = lambda: True
    with pytest.raises(ExperienceClosed):
        hub.take()
    hub.close()


def test_a_full_queue_drops_the_oldest_batches_and_counts_them(store, tmp_path):
    config = load_config("configs/cartpole.yaml", SMALL)
    hub = _hub(store, tmp_path, config)
    hub.publish(_learner_policy(config), 0)
    group = _fake_actor(store)
    _answer(group, hub)
    for sequence in range(1, 11):
        _send(group, hub, sequence)
        _answer(group, hub)
    assert hub.stats() == {"queue_depth": 4, "dropped_batches": 6, "actors": 1}
    assert [hub.take().sequence for _ in range(4)] == [7, 8, 9, 10]
    hub.close()


# ---------------------------------------------------------------------------------------------
# The commands, as a user runs them (each process in its own session, killed with its children)

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


def test_a_late_actor_joins_a_running_learner_and_a_wrong_token_is_refused(tmp_path):
    """A master with one local actor; a second actor joins from another process while it learns;
    an actor with the wrong token is refused; the run ends at its last step, having learned."""
    port = free_port()
    master = _master(
        tmp_path, port, "--actors", "1", "--set", "total_timesteps=40960", "--store-port", str(free_port())
    )
    master.wait_for(r"Actor connected: #1 at", 120)
    intruder = _actor(tmp_path, port, "intruder", token=new_token())
    assert "wrong token" in intruder.finish(60) and intruder.process.returncode == 2
    late = _actor(tmp_path, port, "late")
    output = master.finish(300)
    late_output = late.finish(60)
    assert master.process.returncode == 0 and late.process.returncode == 0, output[-3000:] + late_output[-2000:]
    assert "Actor connected: #2 to the learner (generation 1)" in late_output
    assert re.search(r"Actor connected: #2 at 127\.0\.0\.1 \(.*\); 2 actors", output), output[-3000:]
    assert "Worker refused: 127.0.0.1 (wrong token)" in output
    metrics = _ends_once_at(_run_dir(tmp_path), 40960)
    assert max(event["actors"] for event in metrics) == 2
    assert metrics[-1]["recent_return_mean"] > 60  # random play: about 22
    table = read_nodes(_run_dir(tmp_path))
    assert sorted(row["actor"] for row in table["nodes"]) == [1, 2] and table["finished"]


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
    assert re.search(r"resumed from .*ckpt_\d+\.pth at step", output), output[-3000:]
    assert output.count("to the learner (generation 2)") == 2, output[-3000:]  # both actors came back
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
    _ends_once_at(_run_dir(tmp_path), 10240)
