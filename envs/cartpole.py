"""Batched CartPole with exactly the physics, observation, reward and episode ends of
Gymnasium's `CartPole-v1` (Barto, Sutton & Anderson 1983), as tensor ops over the batch.

The state is (cart position, cart velocity, pole angle, pole angular velocity). The episode
terminates when the cart leaves [-2.4, 2.4] or the pole leans past 12 degrees, and is
truncated after `max_episode_steps` (500) steps. Reward is +1 for every step, the last one
included (or, with `sutton_barto_reward=True`, 0 per step and -1 on termination).

Gymnasium keeps the state in float64; this env keeps it in float32 (the observation dtype) by
default, so one transition agrees with Gymnasium's to float32 rounding. Long free runs then
drift apart, as CartPole amplifies rounding differences; `precision="float64"` computes exactly
as Gymnasium does (tests/test_envs_cartpole.py checks both) at about half the speed.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs.base import VecEnv
from envs.errors import EnvConfigError
from envs.noise import UniformNoise
from envs.options import positive_int
from envs.rendering import import_pygame, surface_to_array

GRAVITY = 9.8
CART_MASS = 1.0
POLE_MASS = 0.1
TOTAL_MASS = CART_MASS + POLE_MASS
POLE_HALF_LENGTH = 0.5
POLE_MASS_LENGTH = POLE_MASS * POLE_HALF_LENGTH
FORCE_MAGNITUDE = 10.0
SECONDS_PER_STEP = 0.02  # "tau"
ANGLE_LIMIT_RADIANS = 12 * 2 * math.pi / 360
POSITION_LIMIT = 2.4
RESET_NOISE = 0.05  # initial state uniform in (-0.05, 0.05)


class CartPoleVecEnv(VecEnv):
    """`num_envs` CartPoles (Gymnasium `CartPole-v1`), stepped together on `device`.

    Keyword arguments:
        max_episode_steps: truncate an episode after this many steps (default 500, as v1).
        sutton_barto_reward: 0 per step and -1 on termination instead of +1 per step
            (Gymnasium's option of the same name; default False).
        precision: "float32" (default, fast) or "float64" (Gymnasium's own arithmetic).

    `score` (in the episode statistics) is the episode length.
    """

    name = "cartpole"
    score_unit = "steps balanced"
    metadata = {"render_fps": 50}
    SCREEN_WIDTH = 600
    SCREEN_HEIGHT = 400

    def __init__(
        self,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        max_episode_steps: int = 500,
        sutton_barto_reward: bool = False,
        precision: str = "float32",
    ):
        super().__init__(num_envs, device, seed)
        if not isinstance(sutton_barto_reward, bool):
            raise EnvConfigError(f"sutton_barto_reward must be true or false, got {sutton_barto_reward!r}")
        if precision not in ("float32", "float64"):
            raise EnvConfigError(f"precision must be 'float32' or 'float64', got {precision!r}")
        self.state_dtype = torch.float32 if precision == "float32" else torch.float64
        self.max_episode_steps = positive_int("max_episode_steps", max_episode_steps)
        self.sutton_barto_reward = sutton_barto_reward
        high = np.array([POSITION_LIMIT * 2, np.inf, ANGLE_LIMIT_RADIANS * 2, np.inf], dtype=np.float32)
        self.single_observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Discrete(2)
        self.state = torch.zeros(num_envs, 4, device=self.device, dtype=self.state_dtype)
        self.episode_length = torch.zeros(num_envs, device=self.device)
        self._constants = _Constants(self.state_dtype, self.device, max_episode_steps)
        self._noise = UniformNoise(num_envs, self.generator, self.device)
        self._screen = None
        self.reset()

    def _random_start_states(self) -> Tensor:
        """(N, 4) fresh start states, uniform in (-0.05, 0.05), one row per env."""
        return self._noise.draw(4, -RESET_NOISE, RESET_NOISE, per_env=True).to(self.state_dtype)

    def _reset_all(self) -> Tensor:
        self.state = self._random_start_states()
        self.episode_length.zero_()
        return self.state.to(torch.float32)

    def set_state(self, state: Tensor | np.ndarray, episode_length: Tensor | np.ndarray | None = None) -> None:
        """Put every env in a given (N, 4) state (tests use it to compare with Gymnasium)."""
        self.state = (
            torch.as_tensor(state, dtype=self.state_dtype, device=self.device).reshape(self.num_envs, 4).clone()
        )
        if episode_length is not None:
            self.episode_length.copy_(torch.as_tensor(episode_length, dtype=torch.float32).reshape(self.num_envs))

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        c = self._constants
        # Every step writes new tensors (the caller may keep the ones returned last time).
        _, x_velocity, angle, angular_velocity = self.state.unbind(1)
        force = torch.mul(actions, c.twice_force).sub_(c.force)  # action 0 -> -10, 1 -> +10
        cos_angle = torch.cos(angle)
        sin_angle = torch.sin(angle)
        # gymnasium/envs/classic_control/cartpole.py, rounded the same way (only the operands of
        # + and * are swapped, which changes no bit):
        #   temp = (force + pole_mass_length * angular_velocity**2 * sin) / total_mass
        #   angular_acceleration = (gravity * sin - cos * temp)
        #                          / (half_length * (4/3 - pole_mass * cos**2 / total_mass))
        #   x_acceleration = temp - pole_mass_length * angular_acceleration * cos / total_mass
        temp = angular_velocity.square().mul_(c.pole_mass_length).mul_(sin_angle).add_(force).div_(c.total_mass)
        denominator = (c.four_thirds - cos_angle.square().mul_(c.pole_mass).div_(c.total_mass)).mul_(c.half_length)
        angular_acceleration = (sin_angle * c.gravity).sub_(cos_angle * temp).div_(denominator)
        x_acceleration = temp.sub_((angular_acceleration * c.pole_mass_length).mul_(cos_angle).div_(c.total_mass))
        # Euler: x + tau * dx/dt for the four state variables at once.
        derivatives = torch.stack((x_velocity, x_acceleration, angular_velocity, angular_acceleration), dim=1)
        self.state = derivatives.mul_(c.seconds_per_step).add_(self.state)

        new_x, _, new_angle, _ = self.state.unbind(1)
        terminated = (new_x.abs() > c.position_limit).logical_or_(new_angle.abs() > c.angle_limit)  # 2.4, 12 deg
        self.episode_length.add_(c.one)
        truncated = self.episode_length >= c.max_episode_steps
        if self.sutton_barto_reward:
            reward = torch.where(terminated, c.minus_one, c.zero)
        else:
            reward = torch.ones(self.num_envs, device=self.device)
        return reward, self.episode_length, terminated, truncated

    def _observe(self, done: Tensor) -> Tensor:
        return self.state.to(torch.float32)  # float32 state: the state itself, never written in place

    def _restart(self, done: Tensor, final_obs: Tensor) -> Tensor:
        self.state = torch.where(done.unsqueeze(1), self._random_start_states(), self.state)
        self.episode_length.masked_fill_(done, 0.0)
        return self.state.to(torch.float32)

    def game_score(self) -> Tensor:
        return self.episode_length

    # Rendering --------------------------------------------------------------------------------

    def render(self, index: int = 0) -> np.ndarray:
        """A 400 x 600 RGB frame of env `index`, drawn like Gymnasium's CartPole."""
        index = self._check_render_index(index)
        state = self.state[index].detach().cpu().numpy().astype(np.float64)
        return draw_cartpole(state)

    def close(self) -> None:
        self._screen = None


class _Constants:
    """The numbers `step` computes with, as 0-dim tensors of the state dtype on the env's device.

    With few envs an op costs microseconds whatever its size, and torch wraps a Python number
    operand in a new tensor every time, which makes the op about twice as slow; a tensor
    operand computes the same (the number is rounded to the state dtype either way).
    """

    def __init__(self, dtype: torch.dtype, device: torch.device, max_episode_steps: int):
        def constant(value: float, constant_dtype: torch.dtype = dtype) -> Tensor:
            return torch.tensor(value, dtype=constant_dtype, device=device)

        self.gravity = constant(GRAVITY)
        self.total_mass = constant(TOTAL_MASS)
        self.pole_mass = constant(POLE_MASS)
        self.half_length = constant(POLE_HALF_LENGTH)
        self.pole_mass_length = constant(POLE_MASS_LENGTH)
        self.four_thirds = constant(4.0 / 3.0)
        self.seconds_per_step = constant(SECONDS_PER_STEP)
        self.force = constant(FORCE_MAGNITUDE)
        self.twice_force = constant(2 * FORCE_MAGNITUDE)
        self.position_limit = constant(POSITION_LIMIT)
        self.angle_limit = constant(ANGLE_LIMIT_RADIANS)
        self.one = constant(1.0, torch.float32)  # episode lengths and rewards are float32
        self.zero = constant(0.0, torch.float32)
        self.minus_one = constant(-1.0, torch.float32)
        self.max_episode_steps = constant(max_episode_steps, torch.float32)


def draw_cartpole(state: np.ndarray, width: int = 600, height: int = 400) -> np.ndarray:
    """Cart, pole, axle and track for one CartPole state, as an H x W x 3 uint8 array."""
    pygame = import_pygame()
    from pygame import gfxdraw

    scale = width / (POSITION_LIMIT * 2)
    pole_width = 10.0
    pole_length = scale * (2 * POLE_HALF_LENGTH)
    cart_width, cart_height = 50.0, 30.0
    surface = pygame.Surface((width, height))
    surface.fill((255, 255, 255))
    left, right, top, bottom = -cart_width / 2, cart_width / 2, cart_height / 2, -cart_height / 2
    axle_offset = cart_height / 4.0
    cart_x = state[0] * scale + width / 2.0
    cart_y = 100  # top of the cart, measured from the bottom (the surface is flipped below)
    cart = [
        (left + cart_x, bottom + cart_y),
        (left + cart_x, top + cart_y),
        (right + cart_x, top + cart_y),
        (right + cart_x, bottom + cart_y),
    ]
    gfxdraw.aapolygon(surface, cart, (0, 0, 0))
    gfxdraw.filled_polygon(surface, cart, (0, 0, 0))
    left, right, top, bottom = -pole_width / 2, pole_width / 2, pole_length - pole_width / 2, -pole_width / 2
    pole = []
    for corner in [(left, bottom), (left, top), (right, top), (right, bottom)]:
        rotated = pygame.math.Vector2(corner).rotate_rad(-state[2])
        pole.append((rotated[0] + cart_x, rotated[1] + cart_y + axle_offset))
    gfxdraw.aapolygon(surface, pole, (202, 152, 101))
    gfxdraw.filled_polygon(surface, pole, (202, 152, 101))
    gfxdraw.aacircle(surface, int(cart_x), int(cart_y + axle_offset), int(pole_width / 2), (129, 132, 203))
    gfxdraw.filled_circle(surface, int(cart_x), int(cart_y + axle_offset), int(pole_width / 2), (129, 132, 203))
    gfxdraw.hline(surface, 0, width, cart_y, (0, 0, 0))
    surface = pygame.transform.flip(surface, False, True)
    return surface_to_array(surface)
