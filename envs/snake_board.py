"""Snake's padded board: its layout, the lookup tables that replace arithmetic in the step, and
the addressing of its cells (`SnakeBoard`, which `SnakeVecEnv` builds on).

Every env's board is one row of a (N, cells) tensor: the playing field with 2 rows of wall above
and below and 1 column left and right, and one scratch cell. Each cell holds the clock time until
which the body stays on it (envs/snake.py says how the clock works).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from envs.errors import EnvConfigError
from envs.noise import UniformNoise

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
ROW_STEP = (-1, 0, 1, 0)  # row change per heading
COLUMN_STEP = (0, 1, 0, -1)  # column change per heading
VECTOR_OBS_SIZE = 18
FIELD_BITS = UniformNoise.FIELD_BITS  # random bits per uniform draw
FOOD_TRIES = 4  # random cells tried per step for a new food
WALL_ROWS = 2  # rows of wall above and below the playing field


class SnakeBoard:
    """The board layout, lookup tables and cell addressing of a batch of Snake games.

    Needs `height`, `width`, `num_cells`, `action_mode`, `device` and `num_envs` (set by the game
    before `_build_tables`), and, for the addressing, the game's `board`, `clock` and `food`.
    """

    height: int
    width: int
    num_cells: int
    num_envs: int
    action_mode: str
    device: torch.device
    board: Tensor
    clock: Tensor
    food: Tensor
    head: Tensor

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
        # Per heading: the (heading, action) indices of straight on, left and right, in either mode.
        turns = [(h, (h + 3) % 4, (h + 1) % 4) for h in range(4)]
        relative = [
            [h * 3 + a for a in range(3)] if self.action_mode == "relative" else [h * 4 + d for d in turns[h]]
            for h in range(4)
        ]
        self._relative_moves_of_heading = torch.tensor(relative, device=dev)
        # Per heading: the actions allowed (absolute mode: every one but the reverse, into the neck).
        allowed = [
            [self.action_mode == "relative" or a != (h + 2) % 4 for a in range(self._actions_per_heading)]
            for h in range(4)
        ]
        self._allowed_of_heading = torch.tensor(allowed, dtype=torch.bool, device=dev)
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
        row_delta = torch.arange(-(height - 1), height, device=dev, dtype=torch.float32).repeat_interleave(
            2 * width - 1
        )
        column_delta = torch.arange(-(width - 1), width, device=dev, dtype=torch.float32).repeat(2 * height - 1)
        food_part = torch.stack((row_delta < 0, column_delta > 0, row_delta > 0, column_delta < 0), dim=1).to(
            torch.float32
        )
        food_part = torch.cat(
            (food_part, torch.div(column_delta, width).unsqueeze(1), torch.div(row_delta, height).unsqueeze(1)), dim=1
        )
        # (danger, heading) rows and food rows: 18 columns each, zero outside their features.
        danger_heading = torch.zeros(64, 4, VECTOR_OBS_SIZE, device=dev)
        danger_heading[:, :, 0:6] = danger_part.unsqueeze(1)
        danger_heading[:, :, 6:10] = torch.eye(4, device=dev)
        food_rows = torch.zeros(self._delta_codes, VECTOR_OBS_SIZE, device=dev)
        food_rows[:, 10:16] = food_part
        # One table for both, the food rows after the 64 x 4 (danger, heading) rows: an observation
        # is the sum of a row of each (`_vector_obs`).
        self._obs_table = torch.cat((danger_heading.view(-1, VECTOR_OBS_SIZE), food_rows))
        self._food_row_of_zero_delta = danger_heading.shape[0] * danger_heading.shape[1] + self._zero_delta_code

    # Cells ------------------------------------------------------------------------------------

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
