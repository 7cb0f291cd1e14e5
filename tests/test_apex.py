"""Ape-X (issue 24): actors feed the replay buffer of one DQN / SAC learner
(trainer/algos/replay_feed.py). A DQN learner fed by two actors over the real transport on
loopback learns CartPole; an actor's first priorities are the learner's TD errors for the same
weights; a SAC learner's buffer holds exactly the transitions its actor sent, each once; a replay
algorithm is refused on several ranks with a pointer to actors, and taken by `--actors`."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from test_actor_learner import RUN_ID, _client, _hub
from test_dqn import LEARNS_CARTPOLE, BestRecentReturn
from trainer.algos.base import Progress, Setup
from trainer.algos.experience import ExperienceClosed
from trainer.algos.replay_feed import ReplayPlayer
from trainer.cluster.actor import Actor
from trainer.cluster.actor_link import BatchLayout, flat_weights, load_flat_weights
from trainer.cluster.nodes import run_key
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.run.loop import train
from trainer.run.setup import config_env_factory, policy_spec

GOAL = 195.0  # mean return of the last 100 episodes (a random policy: about 22)


@pytest.fixture
def store():
    from datetime import timedelta

    from torch.distributed import TCPStore

    from trainer.cluster.launch import free_port

    return TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))


# -- it learns ----------------------------------------------------------------------------------------


def test_a_dqn_learner_fed_by_two_actors_on_loopback_learns_cartpole(store, tmp_path):
    raw = {**LEARNS_CARTPOLE, "seed": 1, "learner_queue_batches": 4, "log_interval": 1}
    config = config_from_dict(raw)
    hub = _hub(store, tmp_path, config)
    actors = [Actor(config, _client(store), RUN_ID, "127.0.0.1", say=lambda line: None) for _ in range(2)]
    threads = [threading.Thread(target=actor.run, daemon=True) for actor in actors]
    for thread in threads:
        thread.start()
    recorder, events = BestRecentReturn(goal=GOAL), []
    started = time.time()
    try:
        result = train(
            config, tmp_path / "run", sinks=[recorder, events.append], should_stop=recorder.reached, experience=hub
        )
    finally:
        store.set(run_key(RUN_ID, "finished"), "1")
        hub.close()
        for thread in threads:
            thread.join(30)
    seconds = time.time() - started
    assert recorder.best >= GOAL, f"after {result.step} steps ({seconds:.0f} s) the mean return reached {recorder.best}"
    metrics = [event for event in events if event["type"] == "metrics"]
    assert {actor.number for actor in actors} == {1, 2} and metrics[-1]["actors"] == 2
    assert all(event["policy_lag"] is not None and event["policy_lag"] >= 0 for event in metrics)
    assert max(event["policy_lag"] for event in metrics) >= 1  # the actors played older weights than learned
    assert metrics[-1]["gradient_steps"] == LEARNS_CARTPOLE["gradient_steps"]
    assert sum(actor.sequence for actor in actors) >= len(metrics)  # every update learned from an actor's batch


# -- priorities ---------------------------------------------------------------------------------------


def _setup(config, experience=None):
    env = config_env_factory(config)(config.num_envs, "cpu", 0)
    env.reset(seed=0)
    spec = policy_spec(config, env)
    return Setup(config, env, torch.device("cpu"), spec, torch.Generator().manual_seed(0), experience=experience), spec


@pytest.mark.parametrize("double_q", [True, False])
def test_an_actors_first_priorities_are_the_learners_td_errors_for_the_same_weights(double_q):
    from trainer.algos.dqn import DQN

    raw = {"algo": "dqn", "env_name": "cartpole", "num_envs": 4, "num_steps": 16, "hidden_sizes": [16]}
    config = config_from_dict({**raw, "use_per": True, "double_q": double_q, "device": "cpu", "gif_interval": 0})
    setup, spec = _setup(config)
    learner = DQN(setup)
    with torch.no_grad():  # a target that differs from the online network, as after a few updates
        for parameter in learner.target.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    player = ReplayPlayer(config, spec)
    load_flat_weights(player.module, flat_weights(learner.feed.nets))  # what the hub sends
    env = config_env_factory(config)(config.num_envs, "cpu", 1)
    batch, _ = player.act(env, env.reset(seed=1), torch.Generator().manual_seed(1), config.num_steps, 0, actor=1)
    env.close()
    # The TD errors by hand, one transition at a time
    expected = torch.empty(batch.rewards.shape)
    torch.set_grad_enabled(False)
    for t in range(config.num_steps):
        for n in range(config.num_envs):
            q = learner.policy(batch.obs[t, n : n + 1])[0]
            next_obs = batch.final_obs[t, n : n + 1]
            online, target = learner.policy(next_obs)[0], learner.target(next_obs)[0]
            value = target[int(online.argmax())] if double_q else target.max()
            bootstrap = 0.0 if batch.terminated[t, n] else config.gamma * float(value)
            expected[t, n] = abs(float(q[int(batch.actions[t, n])]) - (float(batch.rewards[t, n]) + bootstrap))
    torch.set_grad_enabled(True)
    assert batch.terminated.any()  # episode ends are in the batch: their bootstrap is 0
    torch.testing.assert_close(batch.priorities, expected, rtol=1e-5, atol=1e-5)
    # Through the transport and into the learner's buffer: the items' priorities are the actor's.
    layout = BatchLayout.for_run(config, spec)
    assert layout.priorities
    header, body = layout.encode(batch)
    sent = layout.decode(body, 1, 1, 0, int(header[4]))
    learner.feed.setup = setup
    from trainer.algos.replay_feed import write_batch

    write_batch(learner.buffer, sent)
    items = torch.arange(config.num_steps * config.num_envs)
    stored = learner.buffer.tree.get(items).float() ** (1.0 / config.per_alpha)
    torch.testing.assert_close(stored, expected.flatten() + 1e-6, rtol=1e-4, atol=1e-5)
    setup.env.close()


# -- SAC: the buffer holds what was sent -----------------------------------------------------------


class OneActor:
    """An experience source: an Ape-X player in an env of its own, `batches` batches, then closed."""

    def __init__(self, config, spec, batches: int):
        self.player = ReplayPlayer(config, spec)
        self.env = config_env_factory(config)(config.num_envs, "cpu", 2)
        self.obs, self.left, self.version, self.sent = self.env.reset(seed=2), batches, 0, []
        self.config = config

    def take(self):
        if self.left == 0:
            raise ExperienceClosed("the run is stopping")
        self.left -= 1
        generator = torch.Generator().manual_seed(self.left)
        batch, self.obs = self.player.act(
            self.env, self.obs, generator, self.config.num_steps, self.version, actor=1, sequence=len(self.sent) + 1
        )
        self.sent.append(batch)
        return batch

    def publish(self, nets, version: int) -> None:
        load_flat_weights(self.player.module, flat_weights(nets))
        self.version = version

    def stats(self) -> dict:
        return {"queue_depth": 0, "dropped_batches": 0, "actors": 1}


def test_a_sac_learner_fed_by_an_actor_holds_exactly_the_transitions_sent():
    from trainer.algos.sac import SAC

    raw = {"algo": "sac", "env_name": "Pendulum-v1", "num_envs": 2, "num_steps": 8, "hidden_sizes": [16]}
    raw.update(buffer_size=1000, learning_starts=32, mini_batch_size=16, device="cpu", gif_interval=0)
    config = config_from_dict(raw)
    setup, spec = _setup(config)
    source = OneActor(config, spec, batches=5)
    setup.experience = source
    learner = SAC(setup)
    metrics = []
    for update in range(1, 6):
        progress = Progress(update, 10, (update - 1) * 16, 1e-3)
        learner.collect(None, progress)
        metrics.append(learner.update(progress))
    with pytest.raises(ExperienceClosed):
        learner.collect(None, Progress(6, 10, 80, 1e-3))
    sent = source.sent
    buffer = learner.buffer
    assert buffer.size == sum(batch.steps for batch in sent) == 80  # each step once, none twice
    rows = 8 * len(sent)
    torch.testing.assert_close(buffer.obs[:rows], torch.cat([batch.obs for batch in sent]))
    torch.testing.assert_close(buffer.actions[:rows], torch.cat([batch.actions for batch in sent]))
    torch.testing.assert_close(buffer.rewards[:rows], torch.cat([batch.rewards for batch in sent]))
    torch.testing.assert_close(buffer.next_obs[:rows], torch.cat([batch.final_obs for batch in sent]))
    assert [m["policy_lag"] for m in metrics] == [0, 0, 0, 0, 0] and metrics[-1]["actors"] == 1
    assert metrics[-1]["gradient_steps"] == 1 and metrics[0]["gradient_steps"] == 0  # learning_starts 32
    assert source.version == 5  # the learner's weights after each update went back
    source.env.close()
    setup.env.close()


def _batch(first_reward: float, steps: int = 4, envs: int = 1):
    from trainer.algos.experience import ExperienceBatch

    rewards = first_reward + torch.arange(steps * envs, dtype=torch.float32).view(steps, envs)
    flags = torch.zeros(steps, envs, dtype=torch.bool)
    obs = torch.zeros(steps, envs, 3)
    return ExperienceBatch(
        obs,
        torch.zeros(steps, envs, dtype=torch.int64),
        torch.zeros(steps, envs),
        rewards,
        flags,
        flags.clone(),
        obs.clone(),
        torch.zeros(envs, 3),
        torch.zeros(0, 3),
        0,
    )


def test_an_n_step_window_stops_at_the_end_of_an_actors_batch():
    """Batches of two actors written one after the other: the last step of the first batch sums
    its own reward only (and bootstraps from its own next observation), not the next actor's."""
    from trainer.algos.replay import ReplayBuffer
    from trainer.algos.replay_feed import write_batch

    buffer = ReplayBuffer(64, 1, (3,), (), torch.int64, "cpu", gamma=0.5, n_step=3)
    write_batch(buffer, _batch(100.0))
    write_batch(buffer, _batch(200.0))
    batch = buffer._windows(torch.arange(8), torch.arange(8), torch.ones(8))
    # row 0: 100 + 0.5 * 101 + 0.25 * 102; row 3 (the first batch's last): 103 alone; row 4: the next batch's own
    assert batch.returns[:5].tolist() == [100 + 50.5 + 25.5, 101 + 51 + 25.75, 102 + 51.5, 103.0, 200 + 100.5 + 50.5]
    assert batch.discounts[:5].tolist() == [0.125, 0.125, 0.25, 0.5, 0.125]


# -- which processes ------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_several_ranks_are_refused_with_a_pointer_to_actors_which_are_taken(algo):
    from trainer.cluster.learner import learns_from_actors

    with pytest.raises(ConfigError, match="--actors"):
        config_from_dict({"algo": algo, "nproc_per_node": 2})
    assert learns_from_actors(config_from_dict({"algo": algo}))


# -- the command as a user runs it -----------------------------------------------------------------

COMMANDS = {
    "dqn": ["--config", "configs/cartpole_dqn.yaml", "--set", "total_timesteps=4096"],
    "sac": ["--config", "configs/pendulum_sac.yaml", "--set", "total_timesteps=800", "--set", "learning_starts=200"],
}


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_master_with_two_local_actors_runs_a_replay_algorithm_to_its_end(tmp_path, algo):
    """`python -m trainer master --config ... --actors 2` with algo dqn / sac (PER on: the actors'
    priorities travel with their batches): both actors connect, the run ends at its last step
    with each update counted once, and the metrics carry the actors and the policy lag."""
    import json

    from test_cluster import TOKEN, Agent
    from trainer.cluster.launch import free_port

    port = free_port()
    args = ["master", *COMMANDS[algo], "--set", "use_per=true", "--set", "gif_interval=0", "--set", "device=cpu"]
    args += ["--set", "log_interval=1", "--host", "127.0.0.1", "--port", str(port), "--token", TOKEN]
    master = Agent(tmp_path / "master.log", [*args, "--actors", "2", "--runs-dir", str(tmp_path / "runs")])
    output = master.finish(300)
    assert master.process.returncode == 0, output[-3000:]
    assert "Actor connected: #2 to the learner" in output and "Actor dropped" not in output, output[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [event for event in events if event["type"] == "metrics"]
    steps = [event["step"] for event in metrics]
    assert steps == sorted(set(steps)) and events[-1]["status"] == "finished"
    assert max(event["actors"] for event in metrics) == 2
    assert all(event["policy_lag"] >= 0 for event in metrics) and metrics[-1]["gradient_steps"] > 0
