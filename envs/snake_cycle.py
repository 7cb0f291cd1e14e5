"""Snake's way round the board: a fixed Hamiltonian cycle and, for each move, where it leaves the
snake on it (the observation `obs="cycle"`, envs/snake.py).

The filling problem (docs/benchmarks.md#snake-on-10-x-10-filling-the-board): near a full board the
food sits in a pocket of the snake's own body, and opening it takes planning far beyond the next
move. The classic answer is a cycle through every cell of the board: a snake that follows it
never runs into itself and passes every cell once a lap, so it eats every food and fills the
board. It may also cut ahead along the cycle, skipping free cells, as long as it lands before its
tail: then its body still lies on the stretch of the cycle from the tail to the head, in order,
and following the cycle from there stays safe. What the agent learns is when to cut ahead.

The cycle: row 0 from column 1 to the right edge, the rows below it back and forth between the
right edge and column 1, then up column 0 (for an even number of rows; an even number of columns
is the same turned). A board with both sides odd has no such cycle.

For each move (straight on, left, right), the three features, after the 30 of `obs="space"`:
    on the cycle: the move enters the head's successor on the cycle
    ahead of the tail: the body lies on the cycle in order (from the tail to the head, each cell
        further along it than the one before) and the move enters a free cell (or the tail's) at
        most as far along the cycle as the tail: the body stays in order, so following the cycle
        from there is safe. A body out of order (the snake cut across the cycle) gives 0 for all
        three moves, and following the cycle is no longer sure to be safe
    food distance: how far along the cycle the food lies from the cell the move enters, / the
        cells (0: the move eats it; 1 when there is no food or the move hits a wall or the body)
"""

from __future__ import annotations

import torch
from torch import Tensor

from envs.errors import EnvConfigError

CYCLE_FEATURES = 3 * 3  # on the cycle, ahead of the tail, food distance; for straight, left, right


def cycle_order(height: int, width: int) -> list[tuple[int, int]]:
    """The (row, column) cells of a Hamiltonian cycle of the board, in order (each next to the one
    before, the last next to the first)."""
    if height % 2 and width % 2:
        raise EnvConfigError(
            f"obs 'cycle' needs a board with an even number of rows or columns (no cycle through every "
            f"cell exists otherwise), got {height} x {width}"
        )
    if height % 2:  # an even number of columns: the same cycle on the board turned
        return [(row, column) for column, row in cycle_order(width, height)]
    cells = []
    for row in range(height):
        columns = range(1, width) if row % 2 == 0 else range(width - 1, 0, -1)
        cells += [(row, column) for column in columns]
    cells += [(row, 0) for row in range(height - 1, -1, -1)]
    return cells


def cycle_positions(height: int, width: int, board_index, board_size: int, device) -> Tensor:
    """(board_size,) int64: each playing-field cell's place on the cycle (0 .. cells - 1); -1 on
    walls. `board_index(row, column)`: the padded board's index of a cell."""
    positions = torch.full((board_size,), -1, dtype=torch.int64)
    for place, (row, column) in enumerate(cycle_order(height, width)):
        positions[board_index(row, column)] = place
    return positions.to(device)


def in_cycle_order(positions: Tensor, time_left: Tensor, tail_place: Tensor, has_tail: Tensor, cells: int) -> Tensor:
    """(N, 1) bool: the body's cells, from the tail (1 step left) to the head (`length` steps),
    lie ever further along the cycle from the tail (always so for a new game's lone head).

    The body's times left are 1, 2, ..., length, one cell each, so writing each body cell's place
    (counted from the tail's) at its time lays the body out by age; the order holds where every
    entry is larger than the one before. The slots after the head hold cells + slot, larger still.
    """
    num_envs = time_left.shape[0]
    on_body = (time_left >= 1) & (positions >= 0)
    places = (positions.unsqueeze(0) - tail_place).remainder(cells)
    by_age = torch.arange(cells, 2 * cells + 2, device=positions.device).expand(num_envs, -1).clone()
    slot = torch.where(on_body, time_left.clamp(max=cells + 1).to(torch.int64), 0)  # slot 0: the rest
    by_age.scatter_(1, slot, torch.where(on_body, places, 0))
    ordered = (by_age[:, 2:] > by_age[:, 1:-1]).all(1, keepdim=True)
    return ordered | ~has_tail


def cycle_features(
    positions: Tensor, cells: int, board: Tensor, clock: Tensor, head: Tensor, candidates: Tensor, food: Tensor
) -> Tensor:
    """(N, 9) float32, the three features of each move (see the module's docstring).

    positions: `cycle_positions`; cells: the playing field's cells; board: (N, cells) clock times (a cell is taken while its time
    is later than the clock); clock: (N,); head: (N,) board index; candidates: (N, 3) board index
    each move enters; food: (N,) board index, -1 while none.
    """
    time_left = board - clock.unsqueeze(1)
    head_place = positions.index_select(0, head).unsqueeze(1)  # (N, 1)
    entered_place = positions.index_select(0, candidates.view(-1)).view_as(candidates)
    open_move = (time_left.gather(1, candidates) <= 1) & (entered_place >= 0)
    # The tail: the one cell whose time is 1 (it frees on this tick). A new game has none yet:
    # then the whole cycle ahead of the head is free.
    tail_marks = time_left == 1
    has_tail = tail_marks.any(1, keepdim=True)
    tail_place = positions.index_select(0, tail_marks.to(torch.uint8).argmax(1)).unsqueeze(1)
    room = torch.where(has_tail, (tail_place - head_place).remainder(cells), cells)
    ahead = (entered_place - head_place).remainder(cells)  # 0 for a wall: never a step ahead
    on_cycle = open_move & (ahead == 1)
    ahead_of_tail = (
        open_move & (ahead >= 1) & (ahead <= room) & in_cycle_order(positions, time_left, tail_place, has_tail, cells)
    )
    food_place = positions.index_select(0, food.clamp(min=0)).unsqueeze(1)
    to_food = (food_place - entered_place).remainder(cells).to(torch.float32).div_(cells)
    to_food = torch.where(open_move & (food.unsqueeze(1) >= 0), to_food, 1.0)
    features = torch.stack((on_cycle.to(torch.float32), ahead_of_tail.to(torch.float32), to_food), 2)
    return features.view(-1, CYCLE_FEATURES)
