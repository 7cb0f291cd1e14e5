"""Helpers for the envs tests: a tiny Gymnasium env that reports a score, and a wrapper.

They are loaded by entry point (`envs_helpers:ScoringEnv`), the way a user's own code would be.
"""

from __future__ import annotations

import gymnasium
import numpy as np


class ScoringEnv(gymnasium.Env):
    """Every episode lasts `episode_length` steps with reward 1 each, and reports info["score"] = 7."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, episode_length: int = 3, render_mode: str | None = None):
        self.episode_length = episode_length
        self.render_mode = render_mode
        self.observation_space = gymnasium.spaces.Box(0.0, 100.0, shape=(1,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self._steps += 1
        terminated = self._steps >= self.episode_length
        info = {"score": 7.0} if terminated else {}
        return np.array([self._steps], dtype=np.float32), 1.0, terminated, False, info

    def render(self):
        frame = np.zeros((20, 30, 3), dtype=np.uint8)
        frame[:, : 10 * self._steps] = 255
        return frame


class DoubleRewardWrapper(gymnasium.RewardWrapper):
    """Reward shaping by a user wrapper: doubles every reward."""

    def reward(self, reward):
        return 2.0 * reward
