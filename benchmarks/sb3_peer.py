"""The peer: Stable-Baselines3 PPO on Gymnasium's CartPole-v1.

Two measurements, each meant to run in a fresh process (see `benchmarks.contender`):

- `sb3_throughput`: environment steps per second of `PPO.learn` with given settings.
- `sb3_time_to_solve`: the RL Zoo's tuned CartPole-v1 hyperparameters, stopped as soon as the
  mean return of the last 100 finished episodes reaches the target (475), with the return
  against wall seconds along the way.

SB3 runs on the CPU: it is its own advice for MLP policies, and its fastest setting here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# The RL Zoo's tuned PPO hyperparameters for CartPole-v1 (hyperparams/ppo.yml in
# rl-baselines3-zoo): learning rate and clip range are linear schedules "lin_1e-3", "lin_0.2".
RL_ZOO_CARTPOLE = {
    "n_envs": 8,
    "n_timesteps": 100_000,
    "n_steps": 32,
    "batch_size": 256,
    "gae_lambda": 0.8,
    "gamma": 0.98,
    "n_epochs": 20,
    "ent_coef": 0.0,
    "learning_rate": 1e-3,
    "clip_range": 0.2,
}

NET_ARCH = [64, 64]  # SB3's MlpPolicy default for PPO, and our benchmark network


def linear_schedule(initial_value: float) -> Callable[[float], float]:
    """The RL Zoo's `lin_<value>`: falls linearly from `initial_value` to 0 over training."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial_value

    return schedule


def _make_ppo(
    n_envs: int,
    n_steps: int,
    batch_size: int,
    n_epochs: int,
    seed: int,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    ent_coef: float = 0.0,
    learning_rate: float | Callable = 3e-4,
    clip_range: float | Callable = 0.2,
):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)  # DummyVecEnv + Monitor, as the Zoo
    return PPO(
        "MlpPolicy",
        env,
        n_steps=n_steps,
        batch_size=batch_size,
        n_epochs=n_epochs,
        gamma=gamma,
        gae_lambda=gae_lambda,
        ent_coef=ent_coef,
        learning_rate=learning_rate,
        clip_range=clip_range,
        policy_kwargs={"net_arch": NET_ARCH},
        seed=seed,
        device="cpu",
        verbose=0,
    )


def sb3_throughput(
    total_steps: int, num_envs: int, num_steps: int, minibatch_size: int, epochs: int, seed: int = 0
) -> dict[str, Any]:
    """Steps per second of `PPO.learn(total_steps)` with these rollout and update settings."""
    model = _make_ppo(num_envs, num_steps, minibatch_size, epochs, seed)
    start = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    seconds = time.perf_counter() - start
    steps = int(model.num_timesteps)
    model.get_env().close()
    return {"steps": steps, "train_seconds": seconds, "steps_per_second": steps / seconds}


def _solve_callback(target: float, train_start: list[float]):
    """An SB3 callback that records the mean-100 return over wall time and stops at `target`."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class SolveWatcher(BaseCallback):
        def __init__(self):
            super().__init__()
            self.series: list[tuple[float, int, float]] = []  # (train seconds, step, mean-100 return)
            self.solved_train_seconds: float | None = None
            self.solved_unix_time: float | None = None
            self.solved_step: int | None = None

        def _recent_mean(self) -> float | None:
            buffer = self.model.ep_info_buffer  # the last 100 Monitor episodes
            return float(np.mean([info["r"] for info in buffer])) if buffer else None

        def _on_step(self) -> bool:
            if not any("episode" in info for info in self.locals["infos"]):
                return True
            recent = self._recent_mean()
            if recent is not None and recent >= target:
                self.solved_unix_time = time.time()
                self.solved_train_seconds = time.perf_counter() - train_start[0]
                self.solved_step = int(self.num_timesteps)
                self.series.append((self.solved_train_seconds, self.solved_step, recent))
                return False  # stop training: solved
            return True

        def _on_rollout_end(self) -> None:
            recent = self._recent_mean()
            if recent is not None:
                self.series.append((time.perf_counter() - train_start[0], int(self.num_timesteps), recent))

    return SolveWatcher()


def sb3_time_to_solve(
    target: float = 475.0, seed: int = 0, total_steps: int = RL_ZOO_CARTPOLE["n_timesteps"]
) -> dict[str, Any]:
    """RL Zoo CartPole-v1 PPO until the mean return of the last 100 episodes reaches `target`.

    `total_steps` is the Zoo's budget (1e5); the linear schedules decay over it, so a smaller
    budget changes the algorithm (only `--quick` and the smoke test pass one).
    """
    zoo = RL_ZOO_CARTPOLE
    model = _make_ppo(
        zoo["n_envs"],
        zoo["n_steps"],
        zoo["batch_size"],
        zoo["n_epochs"],
        seed,
        gamma=zoo["gamma"],
        gae_lambda=zoo["gae_lambda"],
        ent_coef=zoo["ent_coef"],
        learning_rate=linear_schedule(zoo["learning_rate"]),
        clip_range=linear_schedule(zoo["clip_range"]),
    )
    train_start = [0.0]
    watcher = _solve_callback(target, train_start)
    train_start[0] = time.perf_counter()
    model.learn(total_timesteps=total_steps, callback=watcher)
    seconds = time.perf_counter() - train_start[0]
    steps = int(model.num_timesteps)
    model.get_env().close()
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds,
        "solved": watcher.solved_train_seconds is not None,
        "solve_train_seconds": watcher.solved_train_seconds,
        "solve_unix_time": watcher.solved_unix_time,
        "solve_step": watcher.solved_step,
        "series": watcher.series,
    }
