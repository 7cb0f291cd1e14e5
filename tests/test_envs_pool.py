"""The shared-memory worker pool (envs/pool.py) behind GymVecEnv modes `pool` / `async_pool`
(and `sync`, which runs the workers' loop in this process): the same steps as Gymnasium's
vector envs on the same seeds, auto-reset and final observations, faults (an exception, a
segfault, a hang, the trainer killed) and seeding across worker counts; and how make_vec_env /
the config choose it."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

import envs.doorbell
from envs import make_vec_env
from envs.cores import resolve_num_workers
from envs.gym_vec import GymVecEnv
from envs.pool import EnvWorkerError
from envs_helpers import ScoringEnv
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict

ROOT = Path(__file__).resolve().parents[1]


class FaultyEnv(gymnasium.Env):
    """A small env whose copy number 2 (the one `reset(seed=2)` seeds: the vector env seeds copy
    i with seed + i, and the tests use seed 0) misbehaves at its 3rd step: 'raise', 'segfault'
    or 'hang'."""

    def __init__(self, how: str):
        self.how = how
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.steps, self.fails = 0, False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.fails = seed == 2
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.fails and self.steps == 3:
            user_code_misbehaves(self.how)
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}


def user_code_misbehaves(how: str) -> None:
    if how == "raise":
        raise ZeroDivisionError("the user's step divided by zero")
    if how == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if how == "hang":
        while True:
            time.sleep(0.05)


def random_actions(steps: int, num_envs: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 2, (steps, num_envs), generator=torch.Generator().manual_seed(seed))


def trajectory(env: GymVecEnv, actions: torch.Tensor, pause: float = 0.0) -> list[torch.Tensor]:
    """Every tensor the env returns over `actions`, plus its episode summary at the end;
    `pause` seconds of idling before each step."""
    seen = [env.reset(11)]
    for step_actions in actions:
        time.sleep(pause)
        obs, reward, terminated, truncated, info = env.step(step_actions)
        seen += [obs, reward, terminated, truncated, info["final_obs"]]
    summary = env.stats.drain()
    seen.append(torch.tensor([summary.count, summary.return_mean, summary.length_mean, summary.score_mean]))
    env.close()
    return seen


def test_pool_steps_exactly_like_gymnasium_vector_envs():
    """Gymnasium's AsyncVectorEnv (autoreset SAME_STEP, as its SyncVectorEnv) is the reference
    for our loop, in worker processes (pool, async_pool) and in this process (sync)."""
    actions = random_actions(400, 8)
    reference = trajectory(GymVecEnv("CartPole-v1", 8, seed=11, mode="async"), actions)
    for mode, workers in (("pool", 3), ("async_pool", 2), ("sync", None)):
        pooled = trajectory(GymVecEnv("CartPole-v1", 8, seed=11, mode=mode, num_workers=workers), actions)
        assert len(pooled) == len(reference)
        for index, (ours, theirs) in enumerate(zip(pooled, reference)):
            assert torch.equal(ours, theirs), f"{mode}: tensor {index} differs from Gymnasium's"
    assert reference[-1][0] > 50  # episodes did finish, so auto-reset and final_obs were exercised


def test_pool_steps_exactly_like_gymnasiums_sync_vector_env():
    """The protocol against Gymnasium's own SyncVectorEnv (autoreset SAME_STEP), stepped here
    by hand on the same seeds and actions: observations, rewards, end flags and, where an
    episode ended, the observation it ended on (Gymnasium's info["final_obs"])."""
    actions = random_actions(300, 8, seed=4)
    theirs = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")] * 8, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP
    )
    ours = GymVecEnv("CartPole-v1", 8, seed=11, mode="pool", num_workers=3)
    their_obs, _ = theirs.reset(seed=11)
    assert np.array_equal(ours.reset(11).numpy(), their_obs)
    endings = 0
    for step_actions in actions:
        obs, reward, terminated, truncated, info = ours.step(step_actions)
        their_obs, their_reward, their_terminated, their_truncated, their_info = theirs.step(step_actions.numpy())
        assert np.array_equal(obs.numpy(), their_obs)
        assert np.array_equal(reward.numpy(), their_reward.astype(np.float32))
        assert np.array_equal(terminated.numpy(), their_terminated)
        assert np.array_equal(truncated.numpy(), their_truncated)
        for env in np.flatnonzero(their_terminated | their_truncated):
            assert np.array_equal(info["final_obs"][env].numpy(), their_info["final_obs"][env])
            endings += 1
    assert endings > 50  # auto-resets happened
    ours.close()
    theirs.close()


@pytest.mark.parametrize("stores_in_order", [True, False], ids=["x86: spin, then sleep", "ARM: semaphores only"])
def test_workers_and_learner_wake_each_other_after_waits_longer_than_their_spin(monkeypatch, stores_in_order):
    """A pool's two sides spin on a shared counter for a moment (envs/doorbell.py `SPIN_S`), then
    sleep on a semaphore. Pauses between steps (a slow update) put the workers to sleep; a slow
    env puts the learner to sleep; every step must still come back, the same as without. Where
    the CPU may reorder stores (ARM), only the semaphores carry wake-ups (the forked workers
    inherit the patched flag)."""
    monkeypatch.setattr(envs.doorbell, "STORES_IN_ORDER", stores_in_order)
    actions = random_actions(40, 6, seed=1)
    reference = trajectory(GymVecEnv("CartPole-v1", 6, seed=2, mode="sync"), actions)
    # 1 worker on 2 cores: the learner watches; 3 workers on up to 3 cores leave it none: it sleeps
    for workers, pause in ((1, 0.0), (3, 0.0), (2, 0.02), (3, 0.02)):
        pooled = trajectory(GymVecEnv("CartPole-v1", 6, seed=2, mode="pool", num_workers=workers), actions, pause)
        assert all(torch.equal(a, b) for a, b in zip(pooled, reference)), (workers, pause)
    slow = GymVecEnv(lambda: SlowStepEnv(0.02), 2, seed=0, mode="pool", num_workers=2)
    for _ in range(5):  # each step outlasts the learner's spin
        obs, *_ = slow.step(torch.zeros(2, dtype=torch.int64))
    assert obs[:, 0].tolist() == [5.0, 5.0]
    slow.close()


class SlowStepEnv(gymnasium.Env):
    """Counts its steps in its observation; each step sleeps `seconds`."""

    def __init__(self, seconds: float):
        self.seconds, self.steps = seconds, 0
        self.observation_space = gymnasium.spaces.Box(0.0, 1e6, shape=(1,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        time.sleep(self.seconds)
        self.steps += 1
        return np.full(1, self.steps, dtype=np.float32), 0.0, False, False, {}


def test_auto_reset_keeps_the_final_observation_and_the_env_score():
    env = GymVecEnv(lambda: ScoringEnv(episode_length=3), 4, seed=0, mode="pool", num_workers=2)
    env.reset(0)
    for step in range(1, 4):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(4, dtype=torch.int64))
    assert terminated.all() and not truncated.any()
    assert info["final_obs"][:, 0].tolist() == [3.0] * 4  # the episode's last observation
    assert obs[:, 0].tolist() == [0.0] * 4  # the new episode's first
    summary = env.stats.drain()
    assert summary.count == 4 and summary.length_mean == 3 and summary.return_mean == 3
    assert summary.score_mean == 7  # info["score"] of the last step, as the env reported it
    env.close()


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_same_seed_same_trajectories_whatever_the_worker_count(workers):
    actions = random_actions(200, 10, seed=3)
    one_worker = trajectory(GymVecEnv("CartPole-v1", 10, seed=5, mode="pool", num_workers=1), actions)
    other = trajectory(GymVecEnv("CartPole-v1", 10, seed=5, mode="pool", num_workers=workers), actions)
    assert all(torch.equal(a, b) for a, b in zip(one_worker, other))
    different_seed = GymVecEnv("CartPole-v1", 10, seed=6, mode="pool", num_workers=workers)
    assert not torch.equal(different_seed.reset(12), one_worker[0])
    different_seed.close()


def assert_workers_gone(pids: list[int]) -> None:
    for pid in pids:
        for _ in range(200):  # a killed worker may take a moment to be reaped
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if _is_zombie(pid):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"pool worker {pid} outlived its pool")


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize(
    "how, expected",
    [
        (
            "raise",
            r"pool worker 1 \(envs 2\.\.3\) failed during step: the env raised:(.|\n)*ZeroDivisionError: "
            r"the user's step divided by zero",
        ),
        (
            "segfault",
            r"pool worker 1 \(envs 2\.\.3\) failed during step: the worker process died \(signal SIGSEGV\)"
            r"(.|\n)*user_code_misbehaves",
        ),
        (
            "hang",
            r"pool worker 1 \(envs 2\.\.3\) failed during step: no answer within step_timeout=1 s"
            r"(.|\n)*user_code_misbehaves",
        ),
    ],
)
def test_a_failing_worker_ends_the_run_with_its_traceback(how, expected):
    def factory():
        return FaultyEnv(how)

    env = GymVecEnv(factory, 4, seed=0, mode="pool", num_workers=2, step_timeout=1.0)
    pids = env._pool.pids
    with pytest.raises(EnvWorkerError, match=expected):
        for _ in range(5):
            env.step(torch.zeros(4, dtype=torch.int64))
    assert_workers_gone(pids)
    with pytest.raises(Exception, match="closed"):
        env.step(torch.zeros(4, dtype=torch.int64))


def test_pool_workers_die_with_a_killed_trainer(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent("""
        import sys, time
        from envs.gym_vec import GymVecEnv
        env = GymVecEnv("CartPole-v1", 4, seed=0, mode="pool", num_workers=2)
        print(*env._pool.pids, flush=True)
        time.sleep(600)
    """)
    )
    trainer = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    pids = [int(pid) for pid in trainer.stdout.readline().split()]
    assert len(pids) == 2
    os.kill(trainer.pid, signal.SIGKILL)
    trainer.wait()
    assert_workers_gone(pids)


def test_close_stops_the_workers():
    env = GymVecEnv("CartPole-v1", 4, seed=0, mode="pool", num_workers=2)
    pids = env._pool.pids
    env.close()
    assert_workers_gone(pids)


def test_make_vec_env_picks_the_pool_when_workers_are_asked_for():
    env = make_vec_env("Acrobot-v1", 4, seed=0, num_workers=2)
    assert env.mode == "pool" and env.num_workers == 2
    assert "pool" in env.vectorization and "num_workers: 2" in env.vectorization
    env.close()
    env = make_vec_env("Acrobot-v1", 4, seed=0)
    assert env.mode == "sync" and "no num_workers" in env.vectorization
    env.close()
    env = make_vec_env("Acrobot-v1", 4, seed=0, vector_env="async_pool", num_workers=2)
    assert env.mode == "async_pool" and env.step_groups == (slice(0, 2), slice(2, 4))
    env.close()


def test_num_workers_auto_means_the_usable_cores():
    assert resolve_num_workers("auto", 10**6) == len(os.sched_getaffinity(0))
    assert resolve_num_workers(8, 4) == 4  # never more workers than envs
    config = config_from_dict({"env_name": "Acrobot-v1", "vector_env": "async_pool", "num_workers": "auto"})
    assert config.vector_env == "async_pool" and config.num_workers == "auto"
    assert config_from_dict({"env_name": "Acrobot-v1", "num_workers": ""}).num_workers is None
    with pytest.raises(ConfigError, match="num_workers must be a positive integer, auto or null, got 'many'"):
        config_from_dict({"env_name": "Acrobot-v1", "num_workers": "many"})
    with pytest.raises(ConfigError, match="vector_env must be true, false, sync, async, pool, async_pool"):
        config_from_dict({"env_name": "Acrobot-v1", "vector_env": "threads"})


def test_the_guide_yaml_runs_a_gymnasium_env_through_the_pool(tmp_path):
    from trainer.run.setup import make_training_env

    config = config_from_dict({"env_name": "CartPole-v1", "vector_env": True, "num_workers": 2})
    # CartPole-v1 is our built-in; gym: asks for Gymnasium's, as a user's own env would be
    config = config_from_dict({**config.to_dict(), "env_name": "gym:CartPole-v1"})
    lines: list[str] = []
    env = make_training_env(config, 4, "cpu", 0, log=lines.append)
    assert env.mode == "pool" and env.num_workers == 2
    assert any("vectorisation pool (num_workers: 2" in line for line in lines)
    env.close()


def test_async_pool_learns_cartpole_exactly_as_the_sync_pool(one_torch_thread):
    from trainer import PPO

    results = {}
    for mode in ("pool", "async_pool"):
        model = PPO(
            "gym:CartPole-v1",
            num_envs=16,
            vector_env=mode,
            num_workers=2,
            seed=3,
            device="cpu",
            num_steps=64,
            mini_batch_size=128,
            update_epochs=2,
            learning_rate=2e-3,
            gae_lambda=0.9,
        )
        model.learn(total_timesteps=50_000)
        results[mode] = model.last_result
    learned = results["async_pool"].last_metrics["recent_return_mean"]
    assert learned > 120, f"async_pool PPO reached a recent return of only {learned} (random play: ~22)"
    weights = [p for p in results["async_pool"].policy.state_dict().values()]
    reference = [p for p in results["pool"].policy.state_dict().values()]
    assert all(torch.equal(a, b) for a, b in zip(weights, reference))  # overlap changes no trajectory
