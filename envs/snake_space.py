"""Snake's room to move: which free cells each move can still reach (the observation `obs="space"`).

An agent that sees only the cells next to its head walls itself in once the snake is long: a
move can cut the free board in two and leave the head in the smaller part. Filling the board
takes knowing, for each move, how much room lies behind it and whether the tail (the way out)
can still be reached. This module computes that for every env at once, with no loop over envs:

1. Free cells are those no body holds after this step's tick: the free cells and the tail's
   cell (it leaves as the head moves). Walls and the rest of the body are taken.
2. Every free cell is labelled with the smallest board index of its connected region: each
   round takes the minimum over the cell's four neighbours; it stops when a round changes nothing.
   (Pointer jumping, the label of the label, needs fewer rounds but an int64 gather per round,
   which costs more than the rounds it saves on these small boards.)
3. For each move (straight, left, right, relative to the heading): the share of the free cells
   in the region of the cell the move enters; whether the tail's cell is in it; whether it has a
   way out; whether the food is in it. A way out: the tail's cell is in the region, or a body
   cell next to the region frees within (region size + 1) steps, so a snake that spends its
   time in the region can leave it (a pocket the body opens in time is safe to enter; one it
   does not, a trap).
   A move into a taken cell gets 0 for all four.
"""

from __future__ import annotations

import torch
from torch import Tensor

PER_MOVE = ("room", "tail reachable", "way out", "food reachable")  # each move's features, in order
SPACE_FEATURES = 3 * len(PER_MOVE)  # for straight on, left, right
# A new game: the head alone in the centre, so every move reaches every free cell and the food;
# no tail yet, but the head's own cell (time 3) frees long before the snake could fill the
# board: a way out.
START_SPACE = (1.0, 0.0, 1.0, 1.0) * 3
CHECK_EVERY = 4  # rounds between the tests for "nothing changed" (each a host sync)


def region_labels(free: Tensor, row_step: int, first: int, stop: int) -> Tensor:
    """(N, cells): each free cell's region label (the smallest board index in its region,
    4-connected on the padded board, whose rows are `row_step` cells long); taken cells hold
    `cells`, a label no free cell has. Only cells first..stop-1 (the playing field's rows) can be
    free, and the cells around them are wall, so no region wraps and no shift leaves the board.

    Each round takes, for every cell, the minimum label over itself and its four neighbours, so
    a label travels one cell per round: as many rounds as the longest walk inside a region. The
    labels are the smallest integer type that holds `cells` (uint8 up to a 12 x 12 board): the
    rounds are memory-bound, and a narrow type moves less memory.
    """
    num_envs, cells = free.shape
    dtype = torch.uint8 if cells <= torch.iinfo(torch.uint8).max else torch.int16
    # `cells` on taken cells, 0 on free ones: a maximum with it re-marks the taken cells (a
    # masked_fill costs as much as all the other operations of a round together).
    taken_mark = free.logical_not().to(dtype).mul_(cells)
    labels = torch.arange(cells, dtype=dtype, device=free.device).expand(num_envs, cells)
    labels = torch.maximum(labels, taken_mark)
    field, taken = labels[:, first:stop], taken_mark[:, first:stop]  # views: rounds write `field`
    new = torch.empty_like(field)
    while True:
        for check in range(CHECK_EVERY):
            torch.minimum(labels[:, first - 1 : stop - 1], labels[:, first + 1 : stop + 1], out=new)
            torch.minimum(new, labels[:, first - row_step : stop - row_step], out=new)
            torch.minimum(new, labels[:, first + row_step : stop + row_step], out=new)
            torch.minimum(new, field, out=new)
            torch.maximum(new, taken, out=new)
            if check == CHECK_EVERY - 1 and torch.equal(new, field):
                return labels
            field.copy_(new)


def space_features(
    board: Tensor, clock: Tensor, candidates: Tensor, food: Tensor, row_step: int, first: int, stop: int
) -> Tensor:
    """(N, 12) float32: for each of the 3 moves, the region's share of the free cells, tail
    reachable, a way out, food reachable (see the module's docstring).

    board: (N, cells) clock times (a cell is taken while its time is later than the clock);
    clock: (N,); candidates: (N, 3) board index each move enters; food: (N,) board index, -1
    while none; row_step, first, stop: the padded board's row length and the span of its
    playing field (`region_labels`).
    """
    num_envs, cells = board.shape
    time_left = board - clock.unsqueeze(1)  # > 0 on the body (and walls): steps until it frees
    free = time_left <= 1  # free now, or the tail's cell (time 1: it frees on this tick)
    labels = region_labels(free, row_step, first, stop)
    entered = labels.gather(1, candidates)  # (N, 3); `cells` where the move hits the body or a wall
    open_move = entered < cells
    in_region = labels[:, first:stop].unsqueeze(1) == entered.unsqueeze(2)  # (N, 3, field cells)
    size = in_region.sum(2)
    free_cells = free[:, first:stop].sum(1, keepdim=True, dtype=torch.float32).clamp_(min=1.0)
    room = size.to(torch.float32).div_(free_cells).mul_(open_move)
    # The tail's cell: the field's cell whose time is 1 (a new game has none: then the label is 0,
    # which no move enters).
    tail_label = labels[:, first:stop].mul(time_left[:, first:stop] == 1).amax(1, keepdim=True)
    tail_reachable = entered == tail_label
    # A way out: the tail, or a body cell next to the region that frees within size + 1 steps
    # (the snake can spend `size` steps in the region at best, and leave on the next one).
    # `never`: walls and free cells.
    never = cells + 1
    opens = torch.where(free, never, time_left.clamp(max=never))
    next_opens = torch.minimum(opens[:, first - 1 : stop - 1], opens[:, first + 1 : stop + 1])
    torch.minimum(next_opens, opens[:, first - row_step : stop - row_step], out=next_opens)
    torch.minimum(next_opens, opens[:, first + row_step : stop + row_step], out=next_opens)
    first_exit = torch.where(in_region, next_opens.unsqueeze(1), never).amin(2)  # (N, 3)
    way_out = tail_reachable | (first_exit <= size + 1)
    food_label = labels.gather(1, food.clamp(min=0).unsqueeze(1))
    food_reachable = (entered == food_label) & (food.unsqueeze(1) >= 0)
    features = torch.stack((room, tail_reachable & open_move, way_out & open_move, food_reachable & open_move), 2)
    return features.view(num_envs, SPACE_FEATURES)
