"""Batched grid Snake, plus its pygame renderer.

The snake moves one cell per step. Eating the food grows it by one cell and a new food appears
on a random free cell; running into a wall or into its own body ends the episode; filling the
whole board wins it. An episode is truncated when the snake goes `max_steps_without_food`
steps without eating (so an agent that circles forever still finishes). Score = food eaten.

How the body is stored: every cell holds how many more steps the body stays on it (0 = free):
the head's cell holds the length, the tail's 1. Each step every body cell counts down by one
(unless the snake eats, when the tail stays put) and the new head cell gets the length, so a
move never shifts the body, and the board is one small integer tensor per env.

Actions (default `action_mode="relative"`): 0 = straight on, 1 = turn left, 2 = turn right.
With `action_mode="absolute"`: 0 = up, 1 = right, 2 = down, 3 = left (reversing is ignored).

Observation (default `obs="vector"`, 18 floats in [-1, 1]):
    0-2   danger one cell straight ahead / to the left / to the right (wall or body)
    3-5   danger two cells straight ahead / to the left / to the right
    6-9   heading one-hot: up, right, down, left
    10-13 food is up / right / down / left of the head
    14-15 food column and row minus the head's, divided by the board width and height
    16    snake length / number of cells
    17    steps since the last food / max_steps_without_food
`obs="grid"`: 3 x H x W: body (1 at the head falling towards the tail), head, food.

Reward: `reward_food` (+1) per food, `reward_death` (-1) on a crash, `reward_step` (0) every step.
"""
from __future__ import annotations

import math

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs.base import EnvConfigError, UniformNoise, VecEnv
from envs.rendering import font, import_pygame, surface_to_array

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
ROW_STEP = (-1, 0, 1, 0)  # row change per heading
COLUMN_STEP = (0, 1, 0, -1)  # column change per heading
START_LENGTH = 3
VECTOR_OBS_SIZE = 18


def row_step(heading: Tensor) -> Tensor:
    """Row change for headings 0..3 (up, right, down, left): -1, 0, 1, 0 (no table lookup,
    which is slow on a CPU)."""
    return (heading - 1).mul_(1 - (heading & 1))


def column_step(heading: Tensor) -> Tensor:
    """Column change for headings 0..3: 0, 1, 0, -1."""
    return (2 - heading).mul_(heading & 1)


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EnvConfigError(f"{name} must be a finite number, got {value!r}")
    return float(value)


class SnakeVecEnv(VecEnv):
    """`num_envs` games of Snake stepped together on `device`.

    Keyword arguments (all optional):
        grid_size: board size, an int (square) or [height, width] (default 12; 5..64).
        obs: "vector" (18 features, default) or "grid" (3 x H x W planes for a CNN).
        action_mode: "relative" (straight / left / right, default) or "absolute"
            (up / right / down / left).
        reward_food: reward for eating a food (default 1.0).
        reward_death: reward on the step the snake crashes (default -1.0).
        reward_step: reward added on every step, e.g. -0.01 to hurry (default 0.0).
        max_steps_without_food: truncate the episode after this many steps without eating
            (default 100 + the number of cells: 244 on 12 x 12).

    `score` (in the episode statistics) is the number of foods eaten.
    """

    name = "snake"
    metadata = {"render_fps": 10}

    def __init__(
        self,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        grid_size: int | tuple[int, int] = 12,
        obs: str = "vector",
        action_mode: str = "relative",
        reward_food: float = 1.0,
        reward_death: float = -1.0,
        reward_step: float = 0.0,
        max_steps_without_food: int | None = None,
    ):
        super().__init__(num_envs, device, seed)
        if isinstance(grid_size, int) and not isinstance(grid_size, bool):
            grid_size = (grid_size, grid_size)
        if (
            not isinstance(grid_size, (tuple, list))
            or len(grid_size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and 5 <= v <= 64 for v in grid_size)
        ):
            raise EnvConfigError(f"grid_size must be an integer or [height, width], each 5..64, got {grid_size!r}")
        if obs not in ("vector", "grid"):
            raise EnvConfigError(f"obs must be 'vector' or 'grid', got {obs!r}")
        if action_mode not in ("relative", "absolute"):
            raise EnvConfigError(f"action_mode must be 'relative' or 'absolute', got {action_mode!r}")
        self.height, self.width = int(grid_size[0]), int(grid_size[1])
        self.num_cells = self.height * self.width
        if max_steps_without_food is None:
            max_steps_without_food = 100 + self.num_cells
        if isinstance(max_steps_without_food, bool) or not isinstance(max_steps_without_food, int) or max_steps_without_food < 1:
            raise EnvConfigError(f"max_steps_without_food must be a positive integer, got {max_steps_without_food!r}")
        self.obs_mode = obs
        self.action_mode = action_mode
        self.reward_food = _finite("reward_food", reward_food)
        self.reward_death = _finite("reward_death", reward_death)
        self.reward_step = _finite("reward_step", reward_step)
        self.max_steps_without_food = max_steps_without_food

        dev = self.device
        if obs == "vector":
            self.single_observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(VECTOR_OBS_SIZE,), dtype=np.float32)
        else:
            self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, shape=(3, self.height, self.width), dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Discrete(3 if action_mode == "relative" else 4)
        # Relative directions probed by the danger features: straight, left, right.
        self._probe_turns = torch.tensor([0, 3, 1, 0, 3, 1], device=dev)
        self._probe_distance = torch.tensor([1, 1, 1, 2, 2, 2], device=dev)
        self._headings = torch.arange(4, device=dev)
        self._start_row = self.height // 2
        self._start_column = self.width // 2

        long = dict(dtype=torch.int64, device=dev)
        self._board_dtype = torch.uint8 if self.num_cells <= 255 else torch.int16
        self.board = torch.zeros(num_envs, self.num_cells, dtype=self._board_dtype, device=dev)
        self._start_cell = self._start_row * self.width + self._start_column
        self._start_board = torch.zeros(self.num_cells, dtype=self._board_dtype, device=dev)
        self._start_board[self._start_cell] = START_LENGTH
        self.length = torch.zeros(num_envs, **long)
        self.head_row = torch.zeros(num_envs, **long)
        self.head_column = torch.zeros(num_envs, **long)
        self.heading = torch.zeros(num_envs, **long)
        self.food = torch.zeros(num_envs, **long)  # cell index, -1 while no free cell was found
        self.score = torch.zeros(num_envs, device=dev)
        self.steps_without_food = torch.zeros(num_envs, device=dev)
        self._noise = UniformNoise(num_envs, self.generator, dev)
        self.reset()

    # Game logic -------------------------------------------------------------------------------

    def _start_new_episodes(self, starting: Tensor, fields: Tensor) -> None:
        """Put the envs where `starting` is true at the start of a new game, in place.

        The snake starts as its head in the centre, heading a random way (from `fields[0]`),
        and unrolls to its start length over the first steps; the food goes on the first of
        `fields[1:]`'s random cells that is not the centre.
        """
        self.board.mul_((~starting).to(self._board_dtype).unsqueeze(1))
        start_column = self.board[:, self._start_cell]
        start_column.copy_(torch.where(starting, START_LENGTH, start_column))
        self.length.masked_fill_(starting, START_LENGTH)
        self.head_row.masked_fill_(starting, self._start_row)
        self.head_column.masked_fill_(starting, self._start_column)
        random_heading = (fields[0] * 4).to(torch.int64).clamp_(max=3)
        self.heading.copy_(torch.where(starting, random_heading, self.heading))
        candidates = self._candidate_cells(fields[1:])
        food = self._first_free(candidates, candidates != self._start_cell)
        self.food.copy_(torch.where(starting, food, self.food))
        keep = (~starting).to(torch.float32)
        self.score.mul_(keep)
        self.steps_without_food.mul_(keep)

    @staticmethod
    def _first_free(candidates: Tensor, free: Tensor) -> Tensor:
        """(N,) the first free candidate of each env, -1 when none is free."""
        chosen = torch.full_like(candidates[:, 0], -1)
        for column in reversed(range(candidates.shape[1])):  # a handful of candidates, not envs
            chosen = torch.where(free[:, column], candidates[:, column], chosen)
        return chosen

    def _candidate_cells(self, uniform: Tensor) -> Tensor:
        """(N, k) random cell indices from (k, N) uniform numbers."""
        return (uniform.t() * self.num_cells).to(torch.int64).clamp_(max=self.num_cells - 1)

    def _place_food(self, needs_food: Tensor, uniform: Tensor) -> None:
        """Give a new food to the envs in `needs_food`, on the first free of a few random cells
        (one per row of `uniform`).

        Rejection sampling keeps the food uniform over the free cells; when all are taken
        (a nearly full board) the env has no food this step and tries again on the next.
        """
        candidates = self._candidate_cells(uniform)
        chosen = self._first_free(candidates, self.board.gather(1, candidates) == 0)
        self.food.copy_(torch.where(needs_food, chosen, self.food))

    def _reset_all(self) -> Tensor:
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._start_new_episodes(everyone, self._noise.draw(4))
        return self._vector_obs(torch.zeros(self.num_envs, 6, device=self.device)) if self.obs_mode == "vector" else self._grid_obs()

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        actions = self._discrete_actions(actions)
        if self.action_mode == "relative":
            # Action 0 straight, 1 left (a quarter turn back: +3 mod 4), 2 right (+1).
            turn = torch.where(actions == 1, 3, actions.clamp(max=1))  # 0 -> 0, 1 -> 3, 2 -> 1
            heading = (self.heading + turn).bitwise_and_(3)
        else:
            reverse = actions == (self.heading + 2).bitwise_and_(3)
            heading = torch.where(reverse, self.heading, actions)
        new_row = self.head_row + row_step(heading)
        new_column = self.head_column + column_step(heading)
        hit_wall = (new_row < 0) | (new_row >= self.height) | (new_column < 0) | (new_column >= self.width)
        new_row.clamp_(0, self.height - 1)
        new_column.clamp_(0, self.width - 1)
        new_cell = (new_row * self.width + new_column).unsqueeze(1)

        # The tail (count 1) moves on as the head moves in, so the tail's own cell is safe.
        hit_body = self.board.gather(1, new_cell).squeeze(1) > 1
        crashed = hit_wall | hit_body
        eats = (new_cell.squeeze(1) == self.food) & ~crashed
        alive = ~crashed
        # Every body cell counts down, except when the snake eats (it grows) or has crashed
        # (it stays as it died): min(count, 1) is 1 on the body and 0 elsewhere.
        moves_on = (alive & ~eats).to(self._board_dtype).unsqueeze(1)
        self.board.sub_(torch.minimum(self.board, moves_on))
        self.length.add_(eats.to(torch.int64))
        old_count = self.board.gather(1, new_cell).squeeze(1)
        head_count = torch.where(alive, self.length.to(self._board_dtype), old_count)
        self.board.scatter_(1, new_cell, head_count.unsqueeze(1))
        self.head_row.copy_(torch.where(alive, new_row, self.head_row))
        self.head_column.copy_(torch.where(alive, new_column, self.head_column))
        self.heading.copy_(heading)
        eats_float = eats.to(torch.float32)
        score = self.score.add_(eats_float)
        self.steps_without_food.add_(1.0).mul_(1.0 - eats_float)

        won = self.length >= self.num_cells
        terminated = crashed | won
        truncated = self.steps_without_food >= self.max_steps_without_food
        done = terminated | truncated
        reward = torch.where(crashed, self.reward_death, self.reward_step).add_(eats_float * self.reward_food)
        self.stats.update(reward, score, done)

        fields = self._noise.draw(4)
        self._place_food((eats | (self.food < 0)) & ~done, fields)
        if self.obs_mode == "grid":
            final_obs = self._grid_obs()
            if self.auto_reset:
                self._start_new_episodes(done, fields)
                return self._grid_obs(), reward, terminated, truncated, {"final_obs": final_obs}
            return final_obs, reward, terminated, truncated, {"final_obs": final_obs}
        danger = self._danger()
        final_obs = self._vector_obs(danger)
        if not self.auto_reset:
            return final_obs, reward, terminated, truncated, {"final_obs": final_obs}
        # A finished env did not use `fields` for food above, so its new game can. Nothing is
        # ever in danger at the start (the head alone in the centre), hence danger * keep.
        self._start_new_episodes(done, fields)
        obs = self._vector_obs(danger.mul_((~done).to(torch.float32).unsqueeze(1)))
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    # Observations -----------------------------------------------------------------------------

    def _danger(self) -> Tensor:
        """(N, 6): a wall or body one / two cells ahead, left and right of the head."""
        probe_heading = (self.heading.unsqueeze(1) + self._probe_turns).bitwise_and_(3)  # (N, 6)
        probe_row = self.head_row.unsqueeze(1) + row_step(probe_heading).mul_(self._probe_distance)
        probe_column = self.head_column.unsqueeze(1) + column_step(probe_heading).mul_(self._probe_distance)
        outside = (probe_row < 0) | (probe_row >= self.height) | (probe_column < 0) | (probe_column >= self.width)
        probe_cell = probe_row.clamp_(0, self.height - 1).mul_(self.width).add_(probe_column.clamp_(0, self.width - 1))
        # Body cells still there after the snake moves `distance` cells on.
        still_body = self.board.gather(1, probe_cell) > self._probe_distance
        return (outside | still_body).to(torch.float32)

    def _vector_obs(self, danger: Tensor) -> Tensor:
        obs = torch.empty(self.num_envs, VECTOR_OBS_SIZE, device=self.device)
        obs[:, 0:6] = danger
        obs[:, 6:10] = self.heading.unsqueeze(1) == self._headings
        has_food = self.food >= 0
        food = self.food.clamp(min=0)
        food_row = torch.div(food, self.width, rounding_mode="floor")
        food_column = food - food_row * self.width
        row_delta = torch.where(has_food, food_row - self.head_row, 0)
        column_delta = torch.where(has_food, food_column - self.head_column, 0)
        obs[:, 10] = (row_delta < 0).to(torch.float32)
        obs[:, 11] = (column_delta > 0).to(torch.float32)
        obs[:, 12] = (row_delta > 0).to(torch.float32)
        obs[:, 13] = (column_delta < 0).to(torch.float32)
        obs[:, 14] = column_delta / self.width
        obs[:, 15] = row_delta / self.height
        obs[:, 16] = self.length / self.num_cells
        obs[:, 17] = self.steps_without_food / self.max_steps_without_food
        return obs

    def _grid_obs(self) -> Tensor:
        planes = torch.zeros(self.num_envs, 3, self.num_cells, device=self.device)
        # Body: 1 at the head, falling linearly to 1/length at the tail, 0 off the body.
        planes[:, 0] = self.board.to(torch.float32) / self.length.unsqueeze(1).to(torch.float32)
        head_cell = (self.head_row * self.width + self.head_column).unsqueeze(1)
        planes[:, 1].scatter_(1, head_cell, 1.0)
        has_food = (self.food >= 0).to(torch.float32).unsqueeze(1)
        planes[:, 2].scatter_(1, self.food.clamp(min=0).unsqueeze(1), has_food)
        return planes.view(self.num_envs, 3, self.height, self.width)

    def game_score(self) -> Tensor:
        """(N,) score of each env's current episode (after an auto-reset: of the new one)."""
        return self.score

    # Rendering --------------------------------------------------------------------------------

    def body_cells(self, index: int = 0) -> list[tuple[int, int]]:
        """(row, column) of every body cell of env `index`, head first."""
        index = self._check_render_index(index)
        counts = self.board[index].to(torch.int64).cpu()
        on_body = torch.nonzero(counts > 0).squeeze(1)
        order = torch.argsort(counts[on_body], descending=True)
        return [(int(c) // self.width, int(c) % self.width) for c in on_body[order]]

    def render(self, index: int = 0) -> np.ndarray:
        """An RGB frame of env `index`: score bar, checkered board, snake and food."""
        body = self.body_cells(index)
        food = int(self.food[index])
        food_cell = None if food < 0 else (food // self.width, food % self.width)
        return draw_snake(body, food_cell, int(self.heading[index]), int(self.score[index]), self.height, self.width)


GRASS_LIGHT = (170, 215, 81)
GRASS_DARK = (162, 209, 73)
BAR = (74, 117, 44)
SNAKE_BLUE = (78, 124, 246)
SNAKE_HEAD = (52, 90, 210)
APPLE_RED = (231, 71, 29)


def snake_cell_size(height: int, width: int) -> int:
    return max(8, min(32, 480 // max(height, width)))


def draw_snake(body, food_cell, heading: int, score: int, height: int, width: int) -> np.ndarray:
    """Draw one Snake frame from a body (head first), a food cell and a heading."""
    pygame = import_pygame()
    cell = snake_cell_size(height, width)
    bar = max(32, cell + 12)
    surface = pygame.Surface((width * cell, height * cell + bar))
    surface.fill(BAR)
    for row in range(height):
        for column in range(width):
            colour = GRASS_LIGHT if (row + column) % 2 == 0 else GRASS_DARK
            pygame.draw.rect(surface, colour, (column * cell, bar + row * cell, cell, cell))

    def centre(row: int, column: int) -> tuple[int, int]:
        return column * cell + cell // 2, bar + row * cell + cell // 2

    if food_cell is not None:
        x, y = centre(*food_cell)
        radius = max(3, cell * 2 // 5)
        pygame.draw.circle(surface, APPLE_RED, (x, y + 1), radius)
        pygame.draw.circle(surface, (255, 140, 110), (x - radius // 3, y - radius // 3), max(1, radius // 4))
        pygame.draw.line(surface, (110, 70, 30), (x, y - radius + 1), (x + 2, y - radius - 3), 2)
        pygame.draw.ellipse(surface, (60, 160, 40), (x + 2, y - radius - 4, max(4, cell // 4), max(3, cell // 7)))

    thickness = max(4, cell * 3 // 4)
    for segment, (row, column) in enumerate(body):
        colour = SNAKE_HEAD if segment == 0 else SNAKE_BLUE
        x, y = centre(row, column)
        pygame.draw.rect(surface, colour, (x - thickness // 2, y - thickness // 2, thickness, thickness), border_radius=thickness // 3)
        if segment + 1 < len(body):  # fill the gap to the next segment
            next_x, next_y = centre(*body[segment + 1])
            left, top = min(x, next_x) - thickness // 2, min(y, next_y) - thickness // 2
            pygame.draw.rect(surface, SNAKE_BLUE, (left, top, abs(next_x - x) + thickness, abs(next_y - y) + thickness))
    if body:
        x, y = centre(*body[0])
        pygame.draw.rect(surface, SNAKE_HEAD, (x - thickness // 2, y - thickness // 2, thickness, thickness), border_radius=thickness // 3)
        forward = (COLUMN_STEP[heading], ROW_STEP[heading])
        side = (-forward[1], forward[0])
        eye_radius = max(2, cell // 8)
        for sign in (-1, 1):
            eye_x = x + forward[0] * cell // 6 + sign * side[0] * cell // 5
            eye_y = y + forward[1] * cell // 6 + sign * side[1] * cell // 5
            pygame.draw.circle(surface, (255, 255, 255), (eye_x, eye_y), eye_radius + 1)
            pygame.draw.circle(surface, (20, 20, 40), (eye_x + forward[0], eye_y + forward[1]), max(1, eye_radius - 1))

    text = font(max(20, bar - 6)).render(f"Score {score}", True, (255, 255, 255))
    apple_x = 10 + max(4, bar // 3)
    pygame.draw.circle(surface, APPLE_RED, (apple_x, bar // 2), max(4, bar // 3))
    surface.blit(text, (apple_x + bar // 2 + 6, bar // 2 - text.get_height() // 2))
    return surface_to_array(surface)
