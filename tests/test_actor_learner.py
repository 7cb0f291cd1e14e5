"""Actors and a learner (issue 24), in one process: the transport on loopback (an actor's batches
reach the hub once each, in order; weights go back; a bad batch drops its actor; the queue drops
the oldest when full), and a learner stopped while it waits for a batch. The commands as a user
runs them (a learner with actors, faults, a late actor, another network namespace):
tests/test_actor_learner_commands.py."""

from __future__ import annotations

import json
import math
import threading
import time
from datetime import timedelta

import pytest
import torch

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


class _ClosingSource:
    """An experience source that plays `batches` batches in an env of its own with the weights it
    was last given, then is closed, as the hub is when the learner is told to stop while it waits."""

    def __init__(self, config, batches: int):
        from trainer.nets.build import build_policy
        from trainer.run.setup import config_env_factory, policy_spec

        self.env = config_env_factory(config)(config.num_envs, "cpu", 1)
        self.obs = self.env.reset(seed=1)
        self.policy = build_policy(policy_spec(config, self.env))
        self.config, self.left, self.version = config, batches, 0

    def take(self):
        from trainer.algos.acting import act_batch

        if self.left == 0:
            raise ExperienceClosed("the run is stopping")
        self.left -= 1
        generator = torch.Generator().manual_seed(self.left)
        batch, self.obs = act_batch(self.env, self.policy, self.obs, generator, self.config.num_steps, self.version)
        return batch

    def publish(self, policy, version: int) -> None:
        self.policy.load_state_dict(policy.state_dict())
        self.version = version

    def stats(self) -> dict:
        return {"queue_depth": 0, "dropped_batches": 0, "actors": 1}


def test_a_learner_stopped_while_it_waits_for_experience_ends_stopped_with_every_update_saved(tmp_path):
    """SIGTERM of a learner waiting for a batch (the hub's take() raises ExperienceClosed) ends
    the run as a stop does: status stopped, no update counted for the batch that never came, the
    last update checkpointed, so a resumed learner carries on from there."""
    from trainer.run.layout import checkpoint_path
    from trainer.run.loop import train

    config = load_config("configs/cartpole.yaml", [*SMALL, "algo=appo", "total_timesteps=3200"])
    source = _ClosingSource(config, batches=3)
    result = train(config, tmp_path / "run", experience=source, preflight=False)
    source.env.close()
    steps = 3 * config.num_steps * config.num_envs
    assert result.status == "stopped" and result.step == steps and result.final_model.is_file()
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [event["step"] for event in events if event["type"] == "metrics"] == [steps // 3, 2 * steps // 3, steps]
    assert events[-1]["type"] == "end" and events[-1]["status"] == "stopped" and events[-1]["step"] == steps
    assert not any(event["type"] == "error" for event in events)
    assert checkpoint_path(tmp_path / "run" / "checkpoints", steps).is_file()
