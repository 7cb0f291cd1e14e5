"""IMPALA and APPO (trainer/algos/impala.py): they learn CartPole playing their own env; fed by
actors whose weights are a few updates old (an in-process experience source, the interface
trainer/cluster/ implements) they still learn, count the actors' episodes and report the lag; a
stopped and resumed run ends with the very weights of a straight run; the episodes a batch
carries are those the env's statistics counted (envs/stats.py `take_finished`, `add_finished`).
"""

from __future__ import annotations

import copy

import pytest
import torch

from envs import EpisodeStats
from envs.cartpole import CartPoleVecEnv
from test_dqn import BestRecentReturn, assert_same_weights, stop_after
from trainer.algos.acting import act_batch
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.nets.build import build_policy
from trainer.nets.spec import make_policy_spec
from trainer.run.loop import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GOAL = 195.0  # mean return of the last 100 episodes (a random policy: about 22)
# Measured on the shared 2-core machine, one torch thread (PYTHONPATH=. python tests/test_impala.py):
# impala (4 minibatches) reached 195 after 27-33k steps on seeds 1-3 (8-10 s), appo (4 epochs of one
# minibatch) after 25k / 26k on seeds 1 / 2 (8-9 s).
LEARNS_CARTPOLE = {
    "env_name": "cartpole",
    "num_envs": 8,
    "num_steps": 32,
    "learning_rate": 1e-3,
    "anneal_lr": False,
    "total_timesteps": 100_000,
    "gif_interval": 0,
    "checkpoint": {"interval": 0},
    "device": "cpu",
}
OWN = {"impala": {"num_minibatches": 4}, "appo": {}}


@pytest.mark.parametrize("algo, seed", [("impala", 1), ("impala", 2), pytest.param("appo", 1, marks=pytest.mark.slow)])
def test_it_learns_cartpole_playing_its_own_env(tmp_path, algo, seed):
    recorder = BestRecentReturn(goal=GOAL)
    config = {**LEARNS_CARTPOLE, **OWN[algo], "algo": algo, "seed": seed}
    result = train(config, tmp_path / "run", sinks=[recorder], should_stop=recorder.reached)
    assert recorder.best >= GOAL, f"{algo} seed {seed}: the recent mean return only reached {recorder.best:.1f}"
    assert result.last_metrics["policy_lag"] == 0  # it learns from what its current weights played
    assert result.last_metrics["actors"] is None and result.last_metrics["queue_depth"] is None


class LaggingActors:
    """An experience source in this process: one actor plays its own CartPole envs with the
    weights published `lag` updates before the newest (trainer/cluster/ sends them over a network)."""

    def __init__(self, num_envs: int, num_steps: int, lag: int, seed: int):
        self.env = CartPoleVecEnv(num_envs, seed=seed)
        self.obs = self.env.reset()
        self.num_steps, self.lag = num_steps, lag
        self.generator = torch.Generator().manual_seed(seed)
        self.published: list[tuple[int, dict]] = []
        self.policy = None
        self.sequence = self.episodes = 0

    def publish(self, policy, version: int) -> None:
        self.published = [*self.published, (version, copy.deepcopy(policy.state_dict()))][-(self.lag + 1) :]
        self.policy = self.policy or copy.deepcopy(policy)

    def take(self):
        version, weights = self.published[0]  # `lag` versions old once there are that many
        self.policy.load_state_dict(weights)
        self.sequence += 1
        batch, self.obs = act_batch(
            self.env, self.policy, self.obs, self.generator, self.num_steps, version, actor=1, sequence=self.sequence
        )
        self.episodes += batch.episodes.shape[0]
        return batch

    def stats(self) -> dict[str, float]:
        return {"queue_depth": self.lag, "dropped_batches": 0, "actors": 1}


# Measured as above: with actors 3 updates behind, appo reached 195 after 31k / 67k steps (seeds 1 / 2,
# 15 / 25 s); impala after 54k with one gradient step per batch (14 s), but not within 100k with 4 (the
# lag counts in gradient steps: 4 steps a batch, 3 batches behind, and the ratios are mostly clipped).
@pytest.mark.parametrize(
    "algo, own", [("appo", {}), pytest.param("impala", {"num_minibatches": 1}, marks=pytest.mark.slow)]
)
def test_it_learns_from_actors_whose_weights_are_three_updates_old(tmp_path, algo, own):
    actors = LaggingActors(num_envs=8, num_steps=32, lag=3, seed=5)
    recorder, events = BestRecentReturn(goal=GOAL), []
    config = {**LEARNS_CARTPOLE, **own, "algo": algo, "seed": 1}
    result = train(
        config, tmp_path / "run", sinks=[recorder, events.append], should_stop=recorder.reached, experience=actors
    )
    assert recorder.best >= GOAL, f"{algo} with stale actors: the recent mean return only reached {recorder.best:.1f}"
    metrics = [event for event in events if event["type"] == "metrics"]
    assert [event["policy_lag"] for event in metrics[:5]] == [0, 1, 2, 3, 3]
    assert metrics[-1]["episodes"] == actors.episodes > 100  # the actors' episodes are the run's
    assert (metrics[-1]["actors"], metrics[-1]["queue_depth"], metrics[-1]["dropped_batches"]) == (1, 3, 0)
    assert result.step == len(metrics) * 8 * 32


# -- exact resume -----------------------------------------------------------------------------------

UPDATES = 12


def resume_config(algo: str):
    return config_from_dict(
        {
            "algo": algo,
            "env_name": "cartpole",
            "num_envs": 4,
            "num_steps": 16,
            "num_minibatches": 2,
            "hidden_sizes": [16],
            "total_timesteps": 64 * UPDATES,
            "gif_interval": 0,
            "device": "cpu",
            "seed": 3,
            "checkpoint": {"interval": 3, "keep": 5},
        }
    )


@pytest.mark.parametrize("algo", ["impala", "appo"])
def test_a_stopped_and_resumed_run_equals_a_straight_run(tmp_path, algo):
    config = resume_config(algo)
    straight = train(config, tmp_path / "straight")
    sink, stop = stop_after(UPDATES // 2)
    stopped = train(config, tmp_path / "resumed", sinks=[sink], should_stop=stop)
    assert stopped.status == "stopped" and stopped.step == 64 * UPDATES // 2
    resumed = train(config, tmp_path / "resumed", resume=True)
    assert resumed.status == "finished" and resumed.step == straight.step
    assert resumed.last_metrics["episodes"] == straight.last_metrics["episodes"]
    assert_same_weights(straight.policy, resumed.policy)


# -- episodes ---------------------------------------------------------------------------------------


def test_the_batches_episodes_are_the_ones_the_env_counted_and_add_up_elsewhere():
    env = CartPoleVecEnv(6, seed=2)
    obs = env.reset()
    policy = build_policy(make_policy_spec("ppo-small", env.single_observation_space, env.single_action_space))
    generator = torch.Generator().manual_seed(0)
    env.stats.drain()
    learner_side = EpisodeStats(num_envs=1, device="cpu")  # a learner's env that never steps
    batches = []
    for number in range(7):  # 7 x 50 steps: the step log (32 steps) folds inside and across batches
        batch, obs = act_batch(env, policy, obs, generator, 50, policy_version=number, actor=2, sequence=number + 1)
        batches.append(batch)
        learner_side.add_finished(batch.episodes)
    episodes = torch.cat([batch.episodes for batch in batches])
    played = env.stats.drain()
    assert episodes.shape == (played.count, 3) and played.count > 20
    assert episodes.dtype == torch.float32
    assert learner_side.drain() == played  # counts, means, maxima and the recent window
    # each batch carries one episode per episode end among its steps
    for number, batch in enumerate(batches):
        assert batch.episodes.shape[0] == int((batch.terminated | batch.truncated).sum())
        assert (batch.policy_version, batch.actor, batch.sequence, batch.steps) == (number, 2, number + 1, 300)
    assert torch.equal(episodes[:, 0], episodes[:, 1])  # CartPole pays 1 a step: return = length


def test_add_finished_refuses_a_tensor_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"\(E, 3\)"):
        EpisodeStats(num_envs=2, device="cpu").add_finished(torch.zeros(3, 2))


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"norm_reward": True}, "remove norm_reward"),
        ({"norm_obs": True}, "remove norm_obs"),
        ({"vtrace_rho_bar": 0.5, "vtrace_c_bar": 1.0}, "lower vtrace_c_bar"),
    ],
)
def test_settings_it_cannot_honour_are_refused_by_name(setting, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"algo": "appo", "env_name": "cartpole", **setting})


# -- an env without a tuned config ------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["impala", "appo", "a2c", "ppo"])
def test_an_env_without_a_tuned_config_starts_it_from_defaults_it_accepts(algo):
    """Pendulum-v1 (continuous actions) has no tuned rollout config: each algorithm starts from PPO's
    table for continuous actions (trainer/config/defaults.py), less what it refuses, and validates."""
    from trainer.config.defaults import UNTUNED_DEFAULTS, shipped_config

    table = UNTUNED_DEFAULTS["continuous"]
    config = shipped_config("Pendulum-v1", {"algo": algo})  # what the studio's form and the API load
    assert (config.num_envs, config.num_steps, config.gamma) == (table["num_envs"], table["num_steps"], table["gamma"])
    actors_play_raw = algo in ("impala", "appo")  # V-trace learns from the env's own observations and rewards
    assert config.norm_obs == config.norm_reward == (table["norm_obs"] and not actors_play_raw)
    if algo in ("a2c", "impala"):  # one pass over each batch
        assert config.algo_settings.get("update_epochs", 1) == 1
    else:
        assert config.update_epochs == table["update_epochs"]


# -- the figures ------------------------------------------------------------------------------------
# PYTHONPATH=. python tests/test_impala.py: the steps and seconds each learning run above takes to
# reach GOAL, on one torch thread (the figures in the comments above and in docs/algorithms.md).


class StepReached(BestRecentReturn):
    """The step of the first update whose recent mean return reached the goal."""

    def __init__(self, goal: float):
        super().__init__(goal)
        self.step = None

    def __call__(self, event):
        super().__call__(event)
        if self.step is None and event["type"] == "metrics" and self.reached():
            self.step = event["step"]


def measure(algo: str, seed: int, own: dict, lag: int | None = None) -> str:
    import tempfile
    import time
    from pathlib import Path

    recorder, started = StepReached(goal=GOAL), time.perf_counter()
    source = None if lag is None else LaggingActors(num_envs=8, num_steps=32, lag=lag, seed=5)
    with tempfile.TemporaryDirectory() as folder:
        config = {**LEARNS_CARTPOLE, **own, "algo": algo, "seed": seed}
        train(config, Path(folder) / "run", sinks=[recorder], should_stop=recorder.reached, experience=source)
    reached = f"{recorder.step:,} steps" if recorder.step else f"not within {LEARNS_CARTPOLE['total_timesteps']:,}"
    settings = "".join(f", {name} {value}" for name, value in own.items())
    return f"{algo}{settings}, seed {seed}, lag {lag or 0}: {reached} ({time.perf_counter() - started:.0f} s)"


if __name__ == "__main__":
    torch.set_num_threads(1)
    for algo, seeds, own, lag in [
        ("impala", (1, 2, 3), OWN["impala"], None),
        ("appo", (1, 2), OWN["appo"], None),
        ("appo", (1, 2), {}, 3),
        ("impala", (1,), {"num_minibatches": 1}, 3),
        ("impala", (1,), {"num_minibatches": 4}, 3),
    ]:
        for seed in seeds:
            print(measure(algo, seed, own, lag), flush=True)
