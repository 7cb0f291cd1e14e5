"""Batched grid Snake, plus its pygame renderer.

The snake moves one cell per step. Eating the food grows it by one cell and a new food appears
on a random free cell; running into a wall or into its own body ends the episode; filling the
whole board wins it. An episode is truncated when the snake goes `max_steps_without_food`
steps without eating (so an agent that circles forever still finishes). Score = food eaten.

How the body is stored: every env has a clock, and every cell holds the clock time until which
the body stays on it (a cell is taken while its time is later than the env's clock). Each step
the clock ticks by one (unless the snake eats: then the tail stays) and the new head cell gets
clock + length, so a move touches one clock and one cell per env, never the whole board. Walls
hold a time no clock reaches; a new game jumps the clock past every time on the old board.
Every few hundred steps (a Python counter: no host sync) the board is rebased to clock 0 so
that the small int16 times never overflow.

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

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs.base import EnvConfigError, UniformNoise, VecEnv, finite_number, positive_int, size_pair
from envs.rendering import font, import_pygame, surface_to_array

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
ROW_STEP = (-1, 0, 1, 0)  # row change per heading
COLUMN_STEP = (0, 1, 0, -1)  # column change per heading
START_LENGTH = 3
VECTOR_OBS_SIZE = 18
FIELD_BITS = UniformNoise.FIELD_BITS  # random bits per uniform draw
FOOD_TRIES = 4  # random cells tried per step for a new food
WALL_ROWS = 2  # rows of wall above and below the playing field


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
    score_unit = "food"
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
        if obs not in ("vector", "grid"):
            raise EnvConfigError(f"obs must be 'vector' or 'grid', got {obs!r}")
        if action_mode not in ("relative", "absolute"):
            raise EnvConfigError(f"action_mode must be 'relative' or 'absolute', got {action_mode!r}")
        self.height, self.width = size_pair("grid_size", grid_size, 5, 64)
        self.num_cells = self.height * self.width
        if max_steps_without_food is None:
            max_steps_without_food = 100 + self.num_cells
        self.obs_mode = obs
        self.action_mode = action_mode
        self.reward_food = finite_number("reward_food", reward_food)
        self.reward_death = finite_number("reward_death", reward_death)
        self.reward_step = finite_number("reward_step", reward_step)
        self.max_steps_without_food = positive_int("max_steps_without_food", max_steps_without_food)

        dev = self.device
        if obs == "vector":
            self.single_observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(VECTOR_OBS_SIZE,), dtype=np.float32)
        else:
            self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, shape=(3, self.height, self.width), dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Discrete(3 if action_mode == "relative" else 4)
        self._build_tables()
        long = dict(dtype=torch.int64, device=dev)
        self.board = self._empty_board.repeat(num_envs, 1)
        self.clock = torch.zeros(num_envs, dtype=self._board_dtype, device=dev)
        self._steps_since_rebase = 0
        self.length = torch.zeros(num_envs, **long)
        self.head = torch.zeros(num_envs, **long)  # board index of the head
        self.heading = torch.zeros(num_envs, **long)
        self.food = torch.zeros(num_envs, **long)  # board index of the food, -1 while none found
        self.score = torch.zeros(num_envs, device=dev)
        self.steps_without_food = torch.zeros(num_envs, device=dev)
        # Start of each env's row in the flattened board, and of its scratch cell.
        self._env_base = torch.arange(num_envs, **long) * self._board_size
        self._env_scratch = self._env_base + self._scratch_cell
        self._env_start = self._env_base + self._start_cell
        self._random_bits = torch.empty(num_envs, **long)
        self._between_hooks: tuple[Tensor, ...] = ()  # what one hook of `step` hands the next
        self.reset()

    def _build_tables(self) -> None:
        """The padded board layout and the small lookup tables that replace arithmetic.

        The board has 2 rows of wall above and below the playing field and 1 column left and
        right (a step left of column 0 lands on the previous row's right wall), so a probe 2
        cells ahead never leaves the tensor and walls need no bounds checks: a wall holds a
        time no clock reaches. One more scratch cell takes the writes of crashed snakes.
        """
        dev = self.device
        height, width, cells = self.height, self.width, self.num_cells
        # A clock grows by at most cells + 2 per step (one step plus a new game); every
        # `_rebase_period` steps (a Python counter: no sync) the board is rebased to clock 0.
        # int16 halves the memory the probes read, as long as rebasing stays rare.
        wall16 = torch.iinfo(torch.int16).max
        period16 = (wall16 - 2 * cells - 16) // (cells + 2)
        self._board_dtype = torch.int16 if period16 >= 64 else torch.int32
        self._wall = wall16 if self._board_dtype == torch.int16 else torch.iinfo(torch.int32).max
        self._rebase_period = (self._wall - 2 * cells - 16) // (cells + 2)
        self.board_width = width + 2
        self._board_size = (height + 2 * WALL_ROWS) * self.board_width + 1
        self._scratch_cell = self._board_size - 1
        rows, columns = np.divmod(np.arange(cells), width)
        interior = (rows + WALL_ROWS) * self.board_width + columns + 1
        self._interior_to_board = torch.as_tensor(interior, device=dev)
        row_of = np.full(self._board_size, -1)
        column_of = np.full(self._board_size, -1)
        row_of[interior], column_of[interior] = rows, columns
        self._row_of = torch.as_tensor(row_of, dtype=torch.float32, device=dev)
        self._column_of = torch.as_tensor(column_of, dtype=torch.float32, device=dev)
        empty = torch.full((self._board_size,), self._wall, dtype=self._board_dtype, device=dev)
        empty[self._interior_to_board] = 0
        self._empty_board = empty.unsqueeze(0)
        self._start_interior = (height // 2) * width + width // 2
        self._start_cell = int(interior[self._start_interior])

        # Per (heading, action): the new heading and the move to the new head cell.
        moves = [ROW_STEP[h] * self.board_width + COLUMN_STEP[h] for h in range(4)]
        self._actions_per_heading = 3 if self.action_mode == "relative" else 4
        new_headings = []
        for h in range(4):
            for action in range(self._actions_per_heading):
                if self.action_mode == "relative":
                    new_headings.append((h + (0, 3, 1)[action]) % 4)  # straight, left, right
                else:
                    new_headings.append(h if action == (h + 2) % 4 else action)  # reversing is ignored
        self._new_heading = torch.tensor(new_headings, device=dev)
        self._move_of = torch.tensor([moves[h] for h in new_headings], device=dev)
        # Danger probes per heading: 1 cell straight / left / right, then 2 cells. Kept probe-major
        # ((6, N) in the step): on a CPU, ops over a few long rows beat ops over many short ones.
        probes = []
        for h in range(4):
            left, right = moves[(h + 3) % 4], moves[(h + 1) % 4]
            probes.append([moves[h], left, right, 2 * moves[h], 2 * left, 2 * right])
        self._probe_offsets = torch.tensor(probes, device=dev).t().contiguous()  # (6 probes, 4 headings)
        # A probed cell is dangerous if it is still taken after moving that far.
        self._probe_margin = torch.tensor([1, 1, 1, 2, 2, 2], dtype=self._board_dtype, device=dev).unsqueeze(1)
        self._danger_bit = (1 << torch.arange(6, device=dev)).to(torch.uint8).unsqueeze(1)

        # 15-bit random fields -> a food candidate cell / a start food, exactly as
        # `int(uniform * n)` with uniform = field / 2**15 in float32.
        uniform = torch.arange(1 << FIELD_BITS, device=dev).to(torch.float32).mul_(1.0 / (1 << FIELD_BITS))
        candidate = (uniform * cells).to(torch.int64).clamp_(max=cells - 1)
        self._candidate_of_field = self._interior_to_board.index_select(0, candidate)
        start_food = (uniform * (cells - 1)).to(torch.int64).clamp_(max=cells - 2)
        start_food = start_food + (start_food >= self._start_interior)  # every cell but the head's
        self._start_food_of_field = self._interior_to_board.index_select(0, start_food)
        self._field_shifts = (torch.arange(FOOD_TRIES, device=dev) * FIELD_BITS).unsqueeze(1)

        # The vector observation from two table rows: (danger flags, heading) -> features 0-9
        # and (food row - head row, food column - head column) -> features 10-15 (16 and 17,
        # length and hunger, are divided out). A cell's code is row * (2W - 1) + column, so the
        # difference of two codes names the pair of differences.
        danger_part = ((torch.arange(64, device=dev).unsqueeze(1) >> torch.arange(6, device=dev)) & 1).to(torch.float32)
        code_of = np.zeros(self._board_size, dtype=np.int64)
        code_of[interior] = rows * (2 * width - 1) + columns
        self._code_of = torch.as_tensor(code_of, device=dev)
        self._delta_codes = (2 * height - 1) * (2 * width - 1)
        self._zero_delta_code = (height - 1) * (2 * width - 1) + width - 1
        row_delta = torch.arange(-(height - 1), height, device=dev, dtype=torch.float32).repeat_interleave(2 * width - 1)
        column_delta = torch.arange(-(width - 1), width, device=dev, dtype=torch.float32).repeat(2 * height - 1)
        food_part = torch.stack((row_delta < 0, column_delta > 0, row_delta > 0, column_delta < 0), dim=1).to(torch.float32)
        food_part = torch.cat((food_part, torch.div(column_delta, width).unsqueeze(1), torch.div(row_delta, height).unsqueeze(1)), dim=1)
        # (danger, heading) rows and food rows: 18 columns each, zero outside their features.
        danger_heading = torch.zeros(64, 4, VECTOR_OBS_SIZE, device=dev)
        danger_heading[:, :, 0:6] = danger_part.unsqueeze(1)
        danger_heading[:, :, 6:10] = torch.eye(4, device=dev)
        food_rows = torch.zeros(self._delta_codes, VECTOR_OBS_SIZE, device=dev)
        food_rows[:, 10:16] = food_part
        self._danger_heading_table = danger_heading.view(-1, VECTOR_OBS_SIZE)
        self._food_table = food_rows

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
        return (row + WALL_ROWS) * self.board_width + column + 1

    def set_food(self, row: int, column: int, index: int | None = None) -> None:
        """Put the food of env `index` (all envs if None) on a cell (for scripted scenes)."""
        target = self.food if index is None else self.food[index : index + 1]
        target.fill_(self.board_index(row, column))

    def field_counts(self) -> Tensor:
        """(N, H, W) body counts on the playing field (0 free, the length at the head)."""
        counts = self.board[:, self._interior_to_board] - self.clock.unsqueeze(1)
        return counts.clamp_(min=0).view(self.num_envs, self.height, self.width)

    # Game logic -------------------------------------------------------------------------------

    def _draw_fields(self) -> Tensor:
        """(4, N) random 15-bit integers per env, from one 64-bit draw per env (the same
        stream as `UniformNoise.draw(4, per_env=True)`, whose uniforms are field / 2**15)."""
        self._random_bits.random_(generator=self.generator)
        return (self._random_bits.unsqueeze(0) >> self._field_shifts).bitwise_and_((1 << FIELD_BITS) - 1)

    def _start_new_episodes(self, starting: Tensor, fields: Tensor) -> None:
        """Put the envs where `starting` is true at the start of a new game, in place.

        The snake starts as its head in the centre, heading a random way (from field 0), and
        unrolls to its start length over the first steps; the food goes on one of the other
        cells, uniformly (from field 1).
        """
        # Jumping the clock past every time on the board frees the old snake's cells at once.
        self.clock.add_(starting.to(self._board_dtype).mul_(self.num_cells + 1))
        start_cell = torch.where(starting, self._env_start, self._env_scratch)
        self.board.view(-1).index_copy_(0, start_cell, self.clock + START_LENGTH)
        self.length.masked_fill_(starting, START_LENGTH)
        self.head.masked_fill_(starting, self._start_cell)
        torch.where(starting, fields[0] >> (FIELD_BITS - 2), self.heading, out=self.heading)
        torch.where(starting, self._start_food_of_field.index_select(0, fields[1]), self.food, out=self.food)
        self.score.masked_fill_(starting, 0.0)
        self.steps_without_food.masked_fill_(starting, 0.0)

    def _rebase_board(self) -> None:
        self._steps_since_rebase += 1
        if self._steps_since_rebase >= self._rebase_period:
            self._steps_since_rebase = 0
            self.board.sub_(self.clock.unsqueeze(1))
            torch.maximum(self.board, self._empty_board, out=self.board)
            self.clock.zero_()

    def _reset_all(self) -> Tensor:
        self.board.copy_(self._empty_board.expand_as(self.board))
        self.clock.zero_()
        self._steps_since_rebase = 0
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._start_new_episodes(everyone, self._draw_fields())
        if self.obs_mode == "grid":
            return self._grid_obs()
        return self._vector_obs(torch.zeros(self.num_envs, dtype=torch.int64, device=self.device))

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        self._rebase_board()
        board = self.board.view(-1)
        move = self.heading * self._actions_per_heading + actions
        heading = self._new_heading.index_select(0, move)  # written into self.heading below
        new_cell = self.head + self._move_of.index_select(0, move)
        new_cell_read = new_cell + self._env_base

        # The clock ticks (the tail leaves its cell) unless the snake eats (the food is never
        # on the body or a wall); then the new head cell must be free.
        eats = new_cell == self.food
        self.clock.add_(eats.logical_not())
        crashed = board.index_select(0, new_cell_read) > self.clock
        alive = crashed.logical_not()
        self.length.add_(eats)
        head_write = torch.where(alive, new_cell_read, self._env_scratch)  # a crashed head stays put
        board.index_copy_(0, head_write, self.length.to(self._board_dtype).add_(self.clock))
        torch.where(alive, new_cell, self.head, out=self.head)
        self.heading.copy_(heading)  # in place (tests/test_envs_inference_mode.py says why)
        score = self.score.add_(eats)
        self.steps_without_food.add_(1.0).masked_fill_(eats, 0.0)

        terminated = crashed | (self.length >= self.num_cells)  # a crash, or a full board: won
        truncated = self.steps_without_food >= self.max_steps_without_food
        reward = torch.where(crashed, self.reward_death, self.reward_step)
        reward = torch.where(eats, self.reward_food + self.reward_step, reward)
        self._between_hooks = (eats,)
        return reward, score, terminated, truncated

    def _observe(self, done: Tensor) -> Tensor:
        # What `_restart` needs too is handed on in a tuple, not in tensor attributes: it is no
        # state, and checkpoints copy every tensor attribute.
        (eats,) = self._between_hooks
        fields = self._draw_fields()
        self._place_food((eats | (self.food < 0)) & ~done, fields)
        danger = self._danger_code() if self.obs_mode == "vector" else None
        self._between_hooks = (fields, danger)
        return self._grid_obs() if danger is None else self._vector_obs(danger)

    def _restart(self, done: Tensor, final_obs: Tensor) -> Tensor:
        # A finished env did not use `fields` for food above, so its new game can.
        fields, danger = self._between_hooks
        self._start_new_episodes(done, fields)
        # Nothing is in danger at the start (the head alone in the centre): code 0.
        return self._grid_obs() if danger is None else self._vector_obs(danger.masked_fill_(done, 0))

    def _place_food(self, needs_food: Tensor, fields: Tensor) -> None:
        """Give a new food to the envs in `needs_food`, on the first free of a few random cells
        (one per field).

        Rejection sampling keeps the food uniform over the free cells; when all are taken
        (a nearly full board) the env has no food this step and tries again on the next.
        """
        candidates = self._candidate_of_field.index_select(0, fields.view(-1)).view_as(fields)
        reads = candidates + self._env_base
        free = self.board.view(-1).index_select(0, reads.view(-1)).view_as(reads) <= self.clock
        chosen = torch.where(free[FOOD_TRIES - 1], candidates[FOOD_TRIES - 1], -1)
        for attempt in reversed(range(FOOD_TRIES - 1)):  # a handful of candidates, not envs
            chosen = torch.where(free[attempt], candidates[attempt], chosen)
        torch.where(needs_food, chosen, self.food, out=self.food)

    # Observations -----------------------------------------------------------------------------

    def _danger_code(self) -> Tensor:
        """(N,) int64 in 0..63: bit k set if probe k (1 cell straight / left / right of the
        head, then 2 cells) is dangerous."""
        reads = torch.empty(6, self.num_envs, dtype=torch.int64, device=self.device)
        for probe in range(6):
            torch.index_select(self._probe_offsets[probe], 0, self.heading, out=reads[probe])
        reads += self.head + self._env_base
        counts = self.board.view(-1).index_select(0, reads.view(-1)).view_as(reads)
        dangerous = (counts > self.clock + self._probe_margin).to(torch.uint8)
        return dangerous.mul_(self._danger_bit).sum(0, dtype=torch.int64)

    def _vector_obs(self, danger: Tensor) -> Tensor:
        """The 18 features: 0-15 from one table row (danger code, heading, food minus head),
        16-17 (length, hunger) divided out."""
        food_or_head = torch.where(self.food >= 0, self.food, self.head)  # no food: no direction
        delta = self._code_of.index_select(0, food_or_head).sub_(self._code_of.index_select(0, self.head))
        delta += self._zero_delta_code
        # The two rows fill different columns (zeros elsewhere), so their sum is exact.
        obs = self._danger_heading_table.index_select(0, danger.mul(4).add_(self.heading))
        obs.add_(self._food_table.index_select(0, delta))
        torch.div(self.length, self.num_cells, out=obs[:, 16])
        torch.div(self.steps_without_food, self.max_steps_without_food, out=obs[:, 17])
        return obs

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
