"""`CartPoleNoVelocity`: CartPole with its two velocities hidden (the observation is the cart's
position and the pole's angle only), a Gymnasium ObservationWrapper. A policy that sees one
observation cannot tell which way the pole is moving; one with memory (`model_type: ppo-lstm`)
can, from two. Used as `wrappers: [envs.hide_velocity:CartPoleNoVelocity]` (configs/cartpole_lstm.yaml).
"""

from __future__ import annotations

import gymnasium
import numpy as np

KEPT = (0, 2)  # x, theta of (x, x_dot, theta, theta_dot)


class CartPoleNoVelocity(gymnasium.ObservationWrapper):
    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box) or space.shape != (4,):
            raise ValueError(f"CartPoleNoVelocity wraps CartPole's 4-number observation, got {space}")
        self.observation_space = gymnasium.spaces.Box(space.low[list(KEPT)], space.high[list(KEPT)], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)[list(KEPT)]
