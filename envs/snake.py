"""Batched grid Snake, plus its pygame renderer.

The snake moves one cell per step. Eating the food grows it by one cell and a new food appears
on a random free cell; running into a wall or into its own body ends the episode; filling the
whole board wins it. An episode is truncated when the snake goes `max_steps_without_food`
steps without eating (so an agent that circles forever still finishes). Score = food eaten.

How the body is stored: every cell holds how many more steps the body stays on it (body cells
count length, length - 1, ... 1 from head to tail; free cells hold 0 or less). Each step the
whole board counts down by one (unless the snake eats: then the tail stays) and the new head
cell gets the length, so a move never shifts the body: one subtraction over a small int16
board per env. Walls hold a count no snake reaches; a new game subtracts more than any count
from the old board (folded into the next step's subtraction).

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
        self._build_tables()
        long = dict(dtype=torch.int64, device=dev)
        self.board = self._maintenance_floor.repeat(num_envs, 1)
        # Subtracted from the board at the next step: (cells + 1) clears a finished game.
        self._clear_pending = torch.zeros(num_envs, dtype=torch.int16, device=dev)
        self._steps_since_maintenance = 0
        self.length = torch.zeros(num_envs, **long)
        self.head = torch.zeros(num_envs, **long)  # board index of the head
        self.heading = torch.zeros(num_envs, **long)
        self.food = torch.zeros(num_envs, **long)  # board index of the food, -1 while none found
        self.score = torch.zeros(num_envs, device=dev)
        self.steps_without_food = torch.zeros(num_envs, device=dev)
        self._noise = UniformNoise(num_envs, self.generator, dev)
        self.reset()

    def _build_tables(self) -> None:
        """The padded board layout and the small lookup tables that replace arithmetic.

        The board has 2 rows of wall above and below the playing field and 1 column left and
        right (a step left of column 0 lands on the previous row's right wall), so a probe 2
        cells ahead never leaves the tensor and walls need no bounds checks: a wall holds a
        count no snake reaches. One more scratch cell takes the writes of crashed snakes.
        """
        dev = self.device
        self._board_dtype = torch.int16
        # The board only ever counts down, so every few steps (a Python counter, no sync) walls
        # are topped up and free cells floored, far from int16's limits either way.
        self._wall = 30000
        self._maintenance_period = max(1, 10000 // (self.num_cells + 2))
        self.board_width = self.width + 2
        self._board_size = (self.height + 4) * self.board_width + 1
        self._scratch_cell = self._board_size - 1
        rows, columns = np.divmod(np.arange(self.num_cells), self.width)
        interior = (rows + 2) * self.board_width + columns + 1
        self._interior_to_board = torch.as_tensor(interior, device=dev)
        row_of = np.full(self._board_size, -1)
        column_of = np.full(self._board_size, -1)
        row_of[interior], column_of[interior] = rows, columns
        self._row_of = torch.as_tensor(row_of, dtype=torch.float32, device=dev)
        self._column_of = torch.as_tensor(column_of, dtype=torch.float32, device=dev)
        moves = [ROW_STEP[h] * self.board_width + COLUMN_STEP[h] for h in range(4)]
        self._move = torch.tensor(moves, device=dev)
        # Danger probes, per heading: 1 cell straight / left / right, then 2 cells.
        probes = [[moves[h], moves[(h + 3) % 4], moves[(h + 1) % 4], 2 * moves[h], 2 * moves[(h + 3) % 4], 2 * moves[(h + 1) % 4]] for h in range(4)]
        self._probe_offsets = torch.tensor(probes, device=dev)  # (4 headings, 6 probes)
        self._probe_distance = torch.tensor([1, 1, 1, 2, 2, 2], dtype=self._board_dtype, device=dev).unsqueeze(1)
        self._headings = torch.arange(4, device=dev).unsqueeze(1)
        self._turns = torch.tensor([0, 3, 1], device=dev)  # straight, left (+3 mod 4), right (+1)
        self._start_interior = (self.height // 2) * self.width + self.width // 2
        self._start_cell = int(interior[self._start_interior])
        floor = torch.full((self._board_size,), self._wall, dtype=self._board_dtype, device=dev)
        floor[self._interior_to_board] = -10000
        self._maintenance_floor = floor.unsqueeze(0)

    # Positions --------------------------------------------------------------------------------

    def position(self, board_index: Tensor) -> tuple[Tensor, Tensor]:
        """(row, column) on the playing field of board indices (-1, -1 for walls and 'none')."""
        index = board_index.clamp(min=0)
        missing = board_index < 0
        return (
            self._row_of.take(index).masked_fill_(missing, -1).to(torch.int64),
            self._column_of.take(index).masked_fill_(missing, -1).to(torch.int64),
        )

    @property
    def head_row(self) -> Tensor:
        return self.position(self.head)[0]

    @property
    def head_column(self) -> Tensor:
        return self.position(self.head)[1]

    def board_index(self, row: int, column: int) -> int:
        """The board index of a cell of the playing field."""
        if not (0 <= row < self.height and 0 <= column < self.width):
            raise EnvConfigError(f"cell ({row}, {column}) is outside the {self.height} x {self.width} board")
        return (row + 2) * self.board_width + column + 1

    def set_food(self, row: int, column: int, index: int | None = None) -> None:
        """Put the food of env `index` (all envs if None) on a cell (for scripted scenes)."""
        target = self.food if index is None else self.food[index : index + 1]
        target.fill_(self.board_index(row, column))

    def field_counts(self) -> Tensor:
        """(N, H, W) body counts on the playing field (0 free, the length at the head)."""
        counts = self.board[:, self._interior_to_board] - self._clear_pending.unsqueeze(1)
        return counts.clamp_(min=0).view(self.num_envs, self.height, self.width)

    # Game logic -------------------------------------------------------------------------------

    def _start_new_episodes(self, starting: Tensor, fields: Tensor) -> None:
        """Put the envs where `starting` is true at the start of a new game, in place.

        The snake starts as its head in the centre, heading a random way (from `fields[0]`),
        and unrolls to its start length over the first steps; the food goes on one of the
        other cells, uniformly (from `fields[1]`).
        """
        # The old snake is cleared by the next step's subtraction (no pass over the board
        # now); the head's count is raised by the same amount so that it ends up right.
        clear = self.num_cells + 1
        self._clear_pending.masked_fill_(starting, clear)
        self.board[:, self._start_cell].masked_fill_(starting, START_LENGTH + clear)
        self.length.masked_fill_(starting, START_LENGTH)
        self.head.masked_fill_(starting, self._start_cell)
        random_heading = (fields[:, 0] * 4).to(torch.int64).clamp_(max=3)
        torch.where(starting, random_heading, self.heading, out=self.heading)
        food = (fields[:, 1] * (self.num_cells - 1)).to(torch.int64).clamp_(max=self.num_cells - 2)
        food += food >= self._start_interior  # every cell but the head's, uniformly
        torch.where(starting, self._interior_to_board.index_select(0, food), self.food, out=self.food)
        self.score.masked_fill_(starting, 0.0)
        self.steps_without_food.masked_fill_(starting, 0.0)

    @staticmethod
    def _first_free(candidates: Tensor, free: Tensor) -> Tensor:
        """(N,) the first free candidate of each env, -1 when none is free."""
        chosen = torch.full_like(candidates[:, 0], -1)
        for column in reversed(range(candidates.shape[1])):  # a handful of candidates, not envs
            chosen = torch.where(free[:, column], candidates[:, column], chosen)
        return chosen

    def _place_food(self, needs_food: Tensor, uniform: Tensor) -> None:
        """Give a new food to the envs in `needs_food`, on the first free of a few random cells
        (one per column of `uniform`, (N, k)).

        Rejection sampling keeps the food uniform over the free cells; when all are taken
        (a nearly full board) the env has no food this step and tries again on the next.
        """
        interior = (uniform * self.num_cells).to(torch.int64).clamp_(max=self.num_cells - 1)  # (N, k)
        candidates = self._interior_to_board.index_select(0, interior.view(-1)).view_as(interior)
        chosen = self._first_free(candidates, self.board.gather(1, candidates) <= 0)
        torch.where(needs_food, chosen, self.food, out=self.food)

    def _maintain_board(self) -> None:
        self._steps_since_maintenance += 1
        if self._steps_since_maintenance >= self._maintenance_period:
            self._steps_since_maintenance = 0
            torch.maximum(self.board, self._maintenance_floor, out=self.board)

    def _reset_all(self) -> Tensor:
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._start_new_episodes(everyone, self._noise.draw(4, per_env=True))
        if self.obs_mode == "grid":
            return self._grid_obs()
        return self._vector_obs(torch.zeros(self.num_envs, 6, dtype=self._board_dtype, device=self.device))

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
        actions = self._discrete_actions(actions)
        if self.action_mode == "relative":
            heading = (self.heading + self._turns.index_select(0, actions)).bitwise_and_(3)
        else:
            reverse = actions == (self.heading + 2).bitwise_and_(3)
            heading = torch.where(reverse, self.heading, actions)
        new_cell = self.head + self._move.index_select(0, heading)

        # The board counts down (the tail leaves its cell) unless the snake eats (the food is
        # never on the body or a wall); then the new head cell must be free.
        eats = new_cell == self.food
        countdown = (~eats).to(self._board_dtype).add_(self._clear_pending)
        self.board.sub_(countdown.unsqueeze(1))
        self._clear_pending.zero_()
        self._maintain_board()
        crashed = self.board.gather(1, new_cell.unsqueeze(1)).squeeze(1) > 0
        alive = ~crashed
        self.length.add_(eats)
        head_cell = torch.where(alive, new_cell, self._scratch_cell)  # a crashed head stays put
        self.board.scatter_(1, head_cell.unsqueeze(1), self.length.to(self._board_dtype).unsqueeze(1))
        torch.where(alive, new_cell, self.head, out=self.head)
        self.heading = heading
        score = self.score.add_(eats)
        self.steps_without_food.add_(1.0).masked_fill_(eats, 0.0)

        won = self.length >= self.num_cells
        terminated = crashed | won
        truncated = self.steps_without_food >= self.max_steps_without_food
        done = terminated | truncated
        reward = torch.where(crashed, self.reward_death, self.reward_step)
        reward = torch.where(eats, self.reward_food + self.reward_step, reward)
        self.stats.update(reward, score, done)

        fields = self._noise.draw(4, per_env=True)
        self._place_food((eats | (self.food < 0)) & ~done, fields)
        if self.obs_mode == "grid":
            final_obs = self._grid_obs()
            if self.auto_reset:
                self._start_new_episodes(done, fields)
                return self._grid_obs(), reward, terminated, truncated, {"final_obs": final_obs}
            return final_obs, reward, terminated, truncated, {"final_obs": final_obs}
        probe_counts = self._probe_counts()
        final_obs = self._vector_obs(probe_counts)
        if not self.auto_reset:
            return final_obs, reward, terminated, truncated, {"final_obs": final_obs}
        # A finished env did not use `fields` for food above, so its new game can. Nothing is
        # in danger at the start (the head alone in the centre): zero its probes.
        self._start_new_episodes(done, fields)
        probe_counts.mul_((~done).to(self._board_dtype).unsqueeze(1))
        return self._vector_obs(probe_counts), reward, terminated, truncated, {"final_obs": final_obs}

    # Observations -----------------------------------------------------------------------------

    def _probe_counts(self) -> Tensor:
        """(N, 6) board counts 1 and 2 cells straight ahead, left and right of each head."""
        probes = self._probe_offsets.index_select(0, self.heading).add_(self.head.unsqueeze(1))
        return self.board.gather(1, probes)

    def _vector_obs(self, probe_counts: Tensor) -> Tensor:
        """The 18 features, computed feature-major into one (18, N) buffer, then transposed:
        on a CPU, ops over many short rows are several times slower than over a few long ones."""
        features = torch.empty(VECTOR_OBS_SIZE, self.num_envs, device=self.device)
        # A probed cell is dangerous if it is still body (or wall) after moving that far.
        torch.gt(probe_counts.t(), self._probe_distance, out=features[0:6])
        torch.eq(self.heading, self._headings, out=features[6:10])
        has_food = self.food >= 0
        food = self.food.clamp(min=0)
        row_delta = (self._row_of.index_select(0, food) - self._row_of.index_select(0, self.head)).mul_(has_food)
        column_delta = (self._column_of.index_select(0, food) - self._column_of.index_select(0, self.head)).mul_(has_food)
        torch.lt(row_delta, 0, out=features[10])
        torch.gt(column_delta, 0, out=features[11])
        torch.gt(row_delta, 0, out=features[12])
        torch.lt(column_delta, 0, out=features[13])
        torch.div(column_delta, self.width, out=features[14])
        torch.div(row_delta, self.height, out=features[15])
        torch.div(self.length, self.num_cells, out=features[16])
        torch.div(self.steps_without_food, self.max_steps_without_food, out=features[17])
        return features.t().contiguous()

    def _grid_obs(self) -> Tensor:
        planes = torch.zeros(self.num_envs, 3, self.height, self.width, device=self.device)
        # Body: 1 at the head, falling linearly to 1/length at the tail, 0 off the body.
        torch.div(self.field_counts(), self.length.view(-1, 1, 1), out=planes[:, 0])
        flat = planes.view(self.num_envs, 3, self.num_cells)
        head_row, head_column = self.position(self.head)
        flat[:, 1].scatter_(1, (head_row * self.width + head_column).unsqueeze(1), 1.0)
        food_row, food_column = self.position(self.food)
        has_food = (self.food >= 0).to(torch.float32).unsqueeze(1)
        flat[:, 2].scatter_(1, (food_row * self.width + food_column).clamp(min=0).unsqueeze(1), has_food)
        return planes

    def game_score(self) -> Tensor:
        """(N,) score of each env's current episode (after an auto-reset: of the new one)."""
        return self.score

    # Rendering --------------------------------------------------------------------------------

    def body_cells(self, index: int = 0) -> list[tuple[int, int]]:
        """(row, column) of every body cell of env `index`, head first."""
        index = self._check_render_index(index)
        counts = self.field_counts()[index].to(torch.int64).cpu().flatten()
        on_body = torch.nonzero(counts > 0).squeeze(1)
        order = torch.argsort(counts[on_body], descending=True)
        return [(int(c) // self.width, int(c) % self.width) for c in on_body[order]]

    def render(self, index: int = 0) -> np.ndarray:
        """An RGB frame of env `index`: score bar, checkered board, snake and food."""
        body = self.body_cells(index)
        food_row, food_column = self.position(self.food[index : index + 1])
        food_cell = None if int(food_row) < 0 else (int(food_row), int(food_column))
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
