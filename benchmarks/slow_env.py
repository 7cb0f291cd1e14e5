"""A slow pure-Python Gymnasium env for the actor-learner benchmark: Gymnasium's CartPole physics
and rewards, episodes cut at 500 steps as CartPole-v1's are, and a busy-wait (the CPU spins, as a
game written in Python does) that makes every step take `step_seconds` of wall time (default
300 us). A run names it by its entry point (code to import, so the trainer wants
`--allow-custom-envs`):

    python -m trainer --config configs/cartpole.yaml --allow-custom-envs \\
        --set env_name=benchmarks.slow_env:SlowCartPole --set num_envs=16
"""

from __future__ import annotations

import time

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

ENTRY_POINT = "benchmarks.slow_env:SlowCartPole"
STEP_SECONDS = 300e-6
MAX_EPISODE_STEPS = 500  # CartPole-v1's time limit


class SlowCartPole(CartPoleEnv):
    """CartPole-v1 whose every step takes at least `step_seconds` of wall time, spent spinning."""

    def __init__(self, step_seconds: float = STEP_SECONDS, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self.step_seconds = float(step_seconds)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        deadline = time.perf_counter() + self.step_seconds
        observation, reward, terminated, truncated, info = super().step(action)
        self._steps += 1
        truncated = truncated or self._steps >= MAX_EPISODE_STEPS
        while time.perf_counter() < deadline:  # the slow game: CPU busy, the GIL held
            pass
        return observation, reward, terminated, truncated, info


def seconds_per_step(steps: int = 2000, step_seconds: float = STEP_SECONDS) -> float:
    """Measured wall seconds per step of one SlowCartPole on this machine (the calibration check)."""
    env = SlowCartPole(step_seconds)
    env.reset(seed=0)
    start = time.perf_counter()
    for n in range(steps):
        _, _, terminated, truncated, _ = env.step(n % 2)
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - start) / steps
