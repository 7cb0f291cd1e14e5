"""Snake's 18 features (and the 30 of `obs="space"`, the 39 of `obs="cycle"`) against a plain-Python
Snake: a list of head positions, no tensors.

The reference plays the same actions as the env from every new game's start (head, heading and
food read from the env, as they are random) and, after every step, rebuilds each feature from
its definition: danger one and two cells straight / left / right, heading, food direction and
offset, length, hunger; with `obs="space"` also, from a breadth-first search, the room each move
leaves, whether the tail and the food can be reached from it; with `obs="cycle"`, where each move
leaves the head on the board's cycle (its order of cells is the env's, checked on its own in
tests/test_envs_snake_cycle.py). Only the food the env places after a meal is taken from the env (and
checked to be on a free cell); moving, eating, growing, crashing and hunger are the reference's.
"""

import random

import pytest
import torch

from envs import make_vec_env
from envs.snake_cycle import cycle_order

ROW_STEP = (-1, 0, 1, 0)  # up, right, down, left
COLUMN_STEP = (0, 1, 0, -1)
START_LENGTH = 3


class ReferenceSnake:
    """One game: the head's past cells (newest last); the body is the last `length` of them."""

    def __init__(
        self,
        head: tuple[int, int],
        heading: int,
        food: tuple[int, int] | None,
        height: int,
        width: int,
        max_hunger: int,
    ):
        self.height, self.width, self.max_hunger = height, width, max_hunger
        self.history = [head] * START_LENGTH  # the snake unrolls from its start cell
        self.length = START_LENGTH
        self.heading = heading
        self.food = food
        self.hunger = 0
        self.crashed = False

    @property
    def head(self) -> tuple[int, int]:
        return self.history[-1]

    def cells_left(self, cell: tuple[int, int]) -> int:
        """Steps the body stays on `cell` if the snake does not eat (0: free)."""
        body = self.history[-self.length :]
        for age, taken in enumerate(reversed(body)):  # age 0: the head, which stays `length` steps
            if taken == cell:
                # A crash is a step too: the head stays put, but the tail leaves its cell.
                return max(0, self.length - age - self.crashed)
        return 0

    def inside(self, cell: tuple[int, int]) -> bool:
        return 0 <= cell[0] < self.height and 0 <= cell[1] < self.width

    def ahead(self, direction: int, cells: int) -> tuple[int, int]:
        row, column = self.head
        return row + cells * ROW_STEP[direction], column + cells * COLUMN_STEP[direction]

    def step(self, action: int) -> tuple[float, bool, bool]:
        """Relative action 0 straight, 1 left, 2 right: (reward, terminated, truncated)."""
        self.heading = (self.heading + (0, 3, 1)[action]) % 4
        cell = self.ahead(self.heading, 1)
        eats = cell == self.food
        # Unless it eats, the tail moves on as the head moves in: a cell left for 1 step is free.
        crashed = not self.inside(cell) or (not eats and self.cells_left(cell) > 1)
        self.hunger = 0 if eats else self.hunger + 1  # the crashing step counts too
        if crashed:
            self.crashed = True
            return -1.0, True, self.hunger >= self.max_hunger
        self.history.append(cell)
        self.length += eats
        won = self.length >= self.height * self.width
        return (1.0 if eats else 0.0), won, self.hunger >= self.max_hunger

    def features(self) -> list[float]:
        heading = self.heading
        left, right = (heading + 3) % 4, (heading + 1) % 4
        danger = []
        for cells in (1, 2):
            for direction in (heading, left, right):
                probe = self.ahead(direction, cells)
                # Dangerous: a wall, or body that is still there after moving that far.
                danger.append(float(not self.inside(probe) or self.cells_left(probe) > cells))
        heading_one_hot = [float(direction == heading) for direction in range(4)]
        if self.food is None:
            food = [0.0] * 6
        else:
            rows, columns = self.food[0] - self.head[0], self.food[1] - self.head[1]
            food = [
                float(rows < 0),
                float(columns > 0),
                float(rows > 0),
                float(columns < 0),
                columns / self.width,
                rows / self.height,
            ]
        return (
            danger + heading_one_hot + food + [self.length / (self.height * self.width), self.hunger / self.max_hunger]
        )

    def space_features(self) -> list[float]:
        """For straight, left, right: the share of the free cells reachable from the cell the
        move enters; the tail's cell (free on the next tick) among them; a way out (the tail, or
        a body cell next to them that frees within their number + 1 steps); the food among them.
        All 0 for a move into a wall or the body."""
        cells = [(row, column) for row in range(self.height) for column in range(self.width)]
        free = {cell for cell in cells if self.cells_left(cell) <= 1}
        tail = [cell for cell in cells if self.cells_left(cell) == 1]
        features = []
        for direction in (self.heading, (self.heading + 3) % 4, (self.heading + 1) % 4):
            start = self.ahead(direction, 1)
            if start not in free:
                features += [0.0, 0.0, 0.0, 0.0]
                continue
            region, frontier, exits = {start}, [start], []
            while frontier:
                row, column = frontier.pop()
                for step in range(4):
                    neighbour = (row + ROW_STEP[step], column + COLUMN_STEP[step])
                    if neighbour in free and neighbour not in region:
                        region.add(neighbour)
                        frontier.append(neighbour)
                    elif self.inside(neighbour) and neighbour not in free:
                        exits.append(self.cells_left(neighbour))
            way_out = (bool(tail) and tail[0] in region) or min(exits, default=len(cells) + 9) <= len(region) + 1
            tail_reachable = bool(tail) and tail[0] in region
            features += [len(region) / len(free), float(tail_reachable), float(way_out), float(self.food in region)]
        return features

    def cycle_features(self) -> list[float]:
        """For straight, left, right: the move enters the head's successor on the cycle; it enters
        a free cell (or the tail's) no further along the cycle than the tail (the whole cycle
        ahead when there is no tail yet), with the body in cycle order; the food's distance along the cycle from that cell /
        the cells (1 without food or for a move into a wall or the body)."""
        order = cycle_order(self.height, self.width)
        place = {cell: index for index, cell in enumerate(order)}
        cells = len(order)
        tail = [cell for cell in order if self.cells_left(cell) == 1]
        room = (place[tail[0]] - place[self.head]) % cells if tail else cells
        # The body in cycle order: from the tail to the head, ever further along the cycle.
        body = sorted((cell for cell in order if self.cells_left(cell) >= 1), key=self.cells_left)
        along = [(place[cell] - place[tail[0]]) % cells for cell in body] if tail else []
        in_order = all(later > earlier for earlier, later in zip(along, along[1:]))
        features = []
        for direction in (self.heading, (self.heading + 3) % 4, (self.heading + 1) % 4):
            cell = self.ahead(direction, 1)
            if not self.inside(cell) or self.cells_left(cell) > 1:
                features += [0.0, 0.0, 1.0]
                continue
            ahead = (place[cell] - place[self.head]) % cells
            to_food = 1.0 if self.food is None else (place[self.food] - place[cell]) % cells / cells
            features += [float(ahead == 1), float(in_order and 1 <= ahead <= room), to_food]
        return features

    def observation(self, obs_mode: str) -> list[float]:
        space = self.space_features() if obs_mode in ("space", "cycle") else []
        return self.features() + space + (self.cycle_features() if obs_mode == "cycle" else [])


def _cell(env, board_index) -> tuple[int, int] | None:
    row, column = (int(value) for value in env.position(board_index.reshape(1)))
    return None if row < 0 else (row, column)


def _new_game(env, index: int, max_hunger: int) -> ReferenceSnake:
    return ReferenceSnake(
        _cell(env, env.head[index]),
        int(env.heading[index]),
        _cell(env, env.food[index]),
        env.height,
        env.width,
        max_hunger,
    )


def _careful_action(snake: ReferenceSnake, rng: random.Random) -> int:
    """Mostly a random action without danger one cell ahead, so the snakes grow long."""
    safe = [action for action, dangerous in enumerate(snake.features()[:3]) if not dangerous]
    return rng.choice(safe) if safe and rng.random() < 0.97 else rng.randrange(3)


@pytest.mark.parametrize("obs_mode", ["vector", "space", "cycle"])
@pytest.mark.parametrize("grid_size", [6, (5, 8)])
def test_the_vector_features_match_a_plain_python_snake(grid_size, obs_mode, test_device):
    num_envs, max_hunger = 16, 40
    env = make_vec_env(
        "snake",
        num_envs,
        device=test_device,
        seed=3,
        grid_size=grid_size,
        max_steps_without_food=max_hunger,
        obs=obs_mode,
    )
    obs = env.reset(seed=3).cpu()
    snakes = [_new_game(env, index, max_hunger) for index in range(num_envs)]
    rng = random.Random(0)
    games = longest = 0
    way_out_seen = set()  # the way-out feature of open moves: both answers must come up
    for step in range(250):
        for index, snake in enumerate(snakes):
            if obs_mode != "vector":
                way_out_seen.update(
                    value for room, value in zip(obs[index, 18:30:4].tolist(), obs[index, 20:30:4].tolist()) if room > 0
                )
            assert obs[index].tolist() == pytest.approx(snake.observation(obs_mode), abs=1e-6), (
                f"env {index}, step {step}"
            )
        actions = [_careful_action(snake, rng) for snake in snakes]
        obs, reward, terminated, truncated, info = env.step(torch.tensor(actions, device=test_device))
        obs, final_obs = obs.cpu(), info["final_obs"].cpu()
        for index, snake in enumerate(snakes):
            food_before = snake.food
            expected = snake.step(actions[index])
            got = (float(reward[index]), bool(terminated[index]), bool(truncated[index]))
            assert got == expected, f"env {index}, step {step}: (reward, terminated, truncated)"
            if any(expected[1:]):  # the episode ended: compare the last features, then a new game
                assert final_obs[index].tolist() == pytest.approx(snake.observation(obs_mode), abs=1e-6)
                games += 1
                longest = max(longest, snake.length)
                snakes[index] = _new_game(env, index, max_hunger)
                continue
            snake.food = _cell(env, env.food[index])
            if snake.food != food_before and food_before is not None:
                assert snake.head == food_before, f"env {index}: the food moved without being eaten"
            if snake.food is not None:
                assert snake.cells_left(snake.food) == 0, f"env {index}: food placed on the body"
    assert games >= num_envs, "episodes ended (walls, bodies and hunger) and new games started"
    assert longest >= 8, "some snakes grew long enough to curl up, so body danger is exercised"
    assert obs_mode == "vector" or way_out_seen == {0.0, 1.0}, "moves with and without a way out were checked"
