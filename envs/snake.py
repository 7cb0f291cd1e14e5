"""Batched grid Snake: the rules, the step and the observations (the board's layout and lookup
tables: envs/snake_board.py; the drawing: envs/snake_draw.py).

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
With `action_mode="absolute"`: 0 = up, 1 = right, 2 = down, 3 = left; reversing into the neck is
masked (`action_masks`: the policy never picks it) and, if given anyway, ignored.

Observation (default `obs="vector"`, 18 floats in [-1, 1]):
    0-2   danger one cell straight ahead / to the left / to the right (wall or body)
    3-5   danger two cells straight ahead / to the left / to the right
    6-9   heading one-hot: up, right, down, left
    10-13 food is up / right / down / left of the head
    14-15 food column and row minus the head's, divided by the board width and height
    16    snake length / number of cells
    17    steps since the last food / max_steps_without_food
`obs="space"`: those 18, then 12 for the room each move leaves (envs/snake_space.py): for straight
on, left and right, the share of the free cells still reachable after it, whether the tail is,
whether the region has a way out, and whether the food is in it. What a small MLP needs to fill
the board without walling itself in.
`obs="cycle"`: those 30, then 9 about a fixed cycle through every cell (envs/snake_cycle.py): for
each move, whether it follows the cycle, whether it lands before the tail on it (the body stays in
cycle order: safe), and how far along the cycle the food lies from it. Needs an even side.
`obs="grid"`: 3 x H x W: body (1 at the head falling towards the tail), head, food.

Reward: `reward_food` (+1) per food, `reward_death` (-1) on a crash, `reward_step` (0) every step.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs.base import VecEnv
from envs.errors import EnvConfigError
from envs.options import finite_number, positive_int, size_pair
from envs.snake_board import FIELD_BITS, FOOD_TRIES, VECTOR_OBS_SIZE, WALL_ROWS, SnakeBoard
from envs.snake_cycle import CYCLE_FEATURES, cycle_features, cycle_positions
from envs.snake_draw import draw_snake
from envs.snake_space import SPACE_FEATURES, START_SPACE, space_features

START_LENGTH = 3
OBS_MODES = ("vector", "space", "cycle", "grid")
# From this many envs on, `_vector_obs` sums its two table rows per env with one embedding_bag: it
# writes the (N, 18) observation once, with no second (N, 18) tensor in between (1.2 MB at 16384
# envs, a transient whose freeing can make glibc trim the heap, then page-fault it back); below it,
# two index_selects and an add cost less (the bag's fixed cost is a few microseconds).
OBS_BAG_MIN_ENVS = 1024


class SnakeVecEnv(SnakeBoard, VecEnv):
    """`num_envs` games of Snake stepped together on `device`.

    Keyword arguments (all optional):
        grid_size: board size, an int (square) or [height, width] (default 12; 5..64).
        obs: "vector" (18 features, default), "space" (those and 12 about the room each move
            leaves: 30), "cycle" (those and 9 about a cycle through every cell: 39) or "grid"
            (3 x H x W planes for a CNN).
        action_mode: "relative" (straight / left / right, default) or "absolute"
            (up / right / down / left).
        reward_food: reward for eating a food (default 1.0).
        reward_death: reward on the step the snake crashes (default -1.0).
        reward_step: reward added on every step, e.g. -0.01 to hurry (default 0.0).
        hunger_kills: if True, going `max_steps_without_food` steps without eating ends the game
            as a crash does (terminated, `reward_death`) instead of truncating it, so an agent
            learns that circling until it starves loses (default False). The observation shows
            the hunger, so the game stays Markov either way.
        max_steps_without_food: truncate the episode after this many steps without eating
            (default 100 + the number of cells: 244 on 12 x 12).
        reward_disorder: `obs="cycle"`, relative actions: reward added to a move that takes the
            body out of cycle order while a move that kept it was open (default 0.0; e.g. -1 so
            that the agent keeps the order that makes filling the board sure).

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
        hunger_kills: bool = False,
        reward_disorder: float = 0.0,
    ):
        super().__init__(num_envs, device, seed)
        if obs not in OBS_MODES:
            raise EnvConfigError(f"obs must be one of {', '.join(map(repr, OBS_MODES))}, got {obs!r}")
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
        if not isinstance(hunger_kills, bool):
            raise EnvConfigError(f"hunger_kills must be true or false, got {hunger_kills!r}")
        self.hunger_kills = hunger_kills
        self.reward_disorder = finite_number("reward_disorder", reward_disorder)
        if self.reward_disorder and (obs != "cycle" or action_mode != "relative"):
            raise EnvConfigError(
                "reward_disorder charges a move that breaks the body's cycle order: it needs obs 'cycle' and "
                f"action_mode 'relative', got obs {obs!r} and action_mode {action_mode!r}"
            )

        dev = self.device
        if obs != "grid":
            size = VECTOR_OBS_SIZE + {"vector": 0, "space": SPACE_FEATURES}.get(obs, SPACE_FEATURES + CYCLE_FEATURES)
            self.single_observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(size,), dtype=np.float32)
        else:
            self.single_observation_space = gymnasium.spaces.Box(
                0.0, 1.0, shape=(3, self.height, self.width), dtype=np.float32
            )
        self.single_action_space = gymnasium.spaces.Discrete(3 if action_mode == "relative" else 4)
        self._build_tables()
        if obs == "cycle":  # each cell's place on the cycle (envs/snake_cycle.py)
            self._cycle = cycle_positions(self.height, self.width, self.board_index, self._board_size, dev)
        self._start_space = torch.tensor(START_SPACE, device=dev)
        # The board cells from the playing field's first row to the end of its last (envs/snake_space.py)
        self._field_span = (WALL_ROWS * self.board_width, (WALL_ROWS + self.height) * self.board_width)
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
        # Scratch, not state (so not tensor attributes, which checkpoints copy): the random fields
        # of a step, and with many envs the offsets of `_vector_obs`'s pairs of table rows.
        bag_offsets = torch.arange(0, 2 * num_envs, 2, device=dev) if num_envs >= OBS_BAG_MIN_ENVS else None
        self._scratch = (torch.empty(FOOD_TRIES, num_envs, **long), bag_offsets)
        self._between_hooks: tuple[Tensor, ...] = ()  # what one hook of `step` hands the next
        self.reset()

    # Game logic -------------------------------------------------------------------------------

    def _draw_fields(self) -> Tensor:
        """(4, N) random 15-bit integers per env, from one 64-bit draw per env (the same
        stream as `UniformNoise.draw(4, per_env=True)`, whose uniforms are field / 2**15)."""
        self._random_bits.random_(generator=self.generator)
        fields = self._scratch[0]
        torch.bitwise_right_shift(self._random_bits.unsqueeze(0), self._field_shifts, out=fields)
        return fields.bitwise_and_((1 << FIELD_BITS) - 1)

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
        return self._with_space(self._vector_obs(torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)))

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
        if self.hunger_kills:  # starving is a death: terminated, not truncated
            crashed = crashed | truncated
            terminated = terminated | truncated
            truncated = torch.zeros_like(truncated)
        reward = torch.where(crashed, self.reward_death, self.reward_step)
        reward = torch.where(eats, self.reward_food + self.reward_step, reward)
        if self.reward_disorder:  # the move left the order while one that kept it was open
            keeps = self._keeps_order
            breaks = keeps.any(1) & ~keeps.gather(1, actions.view(-1, 1)).squeeze(1)
            reward = reward.add_(breaks.to(reward.dtype).mul_(self.reward_disorder))
        self._between_hooks = (eats,)
        return reward, score, terminated, truncated

    def _observe(self, done: Tensor) -> Tensor:
        # What `_restart` needs too is handed on in a tuple, not in tensor attributes: it is no
        # state, and checkpoints copy every tensor attribute.
        (eats,) = self._between_hooks
        fields = self._draw_fields()
        self._place_food((eats | (self.food < 0)) & ~done, fields)
        danger = None if self.obs_mode == "grid" else self._danger_code()
        self._between_hooks = (fields, danger)
        return self._grid_obs() if danger is None else self._with_space(self._vector_obs(danger))

    def _restart(self, done: Tensor, final_obs: Tensor) -> Tensor:
        # A finished env did not use `fields` for food above, so its new game can.
        fields, danger = self._between_hooks
        self._start_new_episodes(done, fields)
        if danger is None:
            return self._grid_obs()
        # Nothing is in danger at the start (the head alone in the centre): code 0.
        obs = self._vector_obs(danger.masked_fill_(done, 0))
        if self.obs_mode in ("space", "cycle"):  # every move has the whole board at the start (a constant)
            space = final_obs[:, VECTOR_OBS_SIZE : VECTOR_OBS_SIZE + SPACE_FEATURES]
            obs = torch.cat((obs, torch.where(done.unsqueeze(1), self._start_space, space)), 1)
        if self.obs_mode == "cycle":  # where the new games' heads and food lie on the cycle
            obs = torch.cat((obs, self._cycle_features(self._move_candidates())), 1)
        return obs

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
        delta += self._food_row_of_zero_delta
        danger_row = danger.mul(4).add_(self.heading)
        # The two rows fill different columns (zeros elsewhere), so their sum is exact.
        bag_offsets = self._scratch[1]
        if bag_offsets is None:
            obs = self._obs_table.index_select(0, danger_row).add_(self._obs_table.index_select(0, delta))
        else:  # both rows summed in one op: one pass over the (N, 18) result, no second one to add
            rows = torch.stack((danger_row, delta), dim=1).view(-1)
            obs = torch.embedding_bag(self._obs_table, rows, bag_offsets, False, 0)[0]  # mode 0: sum
        torch.div(self.length, self.num_cells, out=obs[:, 16])
        torch.div(self.steps_without_food, self.max_steps_without_food, out=obs[:, 17])
        return obs

    def _move_candidates(self) -> Tensor:
        """(N, 3) the board index each move (straight on, left, right) enters."""
        moves = self._relative_moves_of_heading.index_select(0, self.heading)
        return self.head.unsqueeze(1) + self._move_of.index_select(0, moves.view(-1)).view_as(moves)

    def _cycle_features(self, candidates: Tensor) -> Tensor:
        features = cycle_features(self._cycle, self.num_cells, self.board, self.clock, self.head, candidates, self.food)
        self._keeps_order = features[:, 1::3] > 0  # (N, 3): each move's "ahead of the tail", for reward_disorder
        return features

    def _with_space(self, vector: Tensor) -> Tensor:
        """`obs="space"`: the vector's 18 features and the 12 of envs/snake_space.py; `obs="cycle"`:
        those and the 9 of envs/snake_cycle.py."""
        if self.obs_mode not in ("space", "cycle"):
            return vector
        candidates = self._move_candidates()
        space = space_features(self.board, self.clock, candidates, self.food, self.board_width, *self._field_span)
        if self.obs_mode == "space":
            return torch.cat((vector, space), 1)
        return torch.cat((vector, space, self._cycle_features(candidates)), 1)

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

    # What evaluation counts as a win (trainer/serving/evaluate.py `count_outcomes`): a full board.
    win_text = "board filled"

    @property
    def winning_score(self) -> int:
        """The score of a game won: the food that fills the board from the starting length."""
        return self.num_cells - START_LENGTH

    def action_masks(self) -> Tensor | None:
        """Absolute mode: (N, 4) bool, every direction but the reverse of the heading (the move
        into the snake's own neck); one table lookup, no loop over envs. Relative mode (straight,
        left, right): None, as no action is ever forbidden."""
        if self.action_mode == "relative":
            return None
        return self._allowed_of_heading.index_select(0, self.heading)

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
