"""Single-env Gymnasium versions of the built-in games (`gymnasium.make("FlappyBird-v0")`).

Each is a one-env batch of the native game, behind the plain `gymnasium.Env` API with numpy
observations, so the games work with any RL library. `render_mode="rgb_array"` returns frames;
`render_mode="human"` shows them in a pygame window at the game's speed. `info["score"]` is
the game score (pipes passed, food eaten). A game that masks actions (Snake in absolute mode)
adds `info["action_mask"]` (bool, one per action) and has `action_masks()`, as sb3-contrib's
MaskablePPO reads them.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch

from envs.base import VecEnv
from envs.rendering import import_pygame


class NativeSingleEnv(gymnasium.Env):
    """A `gymnasium.Env` around a one-env batch of a native game; keyword arguments go to the game."""

    vec_env_class: type[VecEnv]
    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None, **game_kwargs):
        if render_mode not in (None, "human", "rgb_array"):
            raise ValueError(f"render_mode must be None, 'human' or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._game = self.vec_env_class(num_envs=1, device="cpu", seed=None, **game_kwargs)
        self._game.auto_reset = False  # keep the crash on screen until reset()
        self.observation_space = self._game.single_observation_space
        self.action_space = self._game.single_action_space
        self.metadata = {"render_modes": ["human", "rgb_array"], "render_fps": self._game.metadata["render_fps"]}
        self._window = None
        self._clock = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs = self._game.reset(seed=seed)  # no seed: the game's generator carries on
        if self.render_mode == "human":
            self.render()
        return obs[0].numpy(), self._with_mask({"score": 0.0})

    def step(self, action):
        obs, reward, terminated, truncated, _ = self._game.step(torch.as_tensor([int(action)]))
        info = self._with_mask({"score": float(self._game.game_score()[0])})
        if self.render_mode == "human":
            self.render()
        return obs[0].numpy(), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def action_masks(self) -> np.ndarray | None:
        """The actions allowed now (bool, one per action), or None if the game forbids none."""
        masks = self._game.action_masks()
        return None if masks is None else masks[0].numpy().copy()

    def _with_mask(self, info: dict) -> dict:
        mask = self.action_masks()
        if mask is not None:
            info["action_mask"] = mask
        return info

    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; make the env with render_mode='rgb_array'")
            return None
        frame = self._game.render(0)
        if self.render_mode == "rgb_array":
            return frame
        pygame = import_pygame()
        if self._window is None:
            pygame.display.init()
            pygame.display.set_caption(type(self).__name__)
            self._window = pygame.display.set_mode((frame.shape[1], frame.shape[0]))
            self._clock = pygame.time.Clock()
        pygame.surfarray.blit_array(self._window, np.transpose(frame, (1, 0, 2)))
        pygame.event.pump()
        pygame.display.flip()
        self._clock.tick(self.metadata["render_fps"])
        return None

    def close(self):
        if self._window is not None:
            import pygame

            pygame.display.quit()
            self._window = None
        self._game.close()


class FlappyBirdEnv(NativeSingleEnv):
    """Flappy Bird as a single Gymnasium env (id `FlappyBird-v0`); kwargs as FlappyBirdVecEnv."""

    from envs.flappy_bird import FlappyBirdVecEnv as vec_env_class


class SnakeEnv(NativeSingleEnv):
    """Snake as a single Gymnasium env (id `Snake-v0`); kwargs as SnakeVecEnv."""

    from envs.snake import SnakeVecEnv as vec_env_class
