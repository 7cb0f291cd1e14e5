"""Snake's `obs="cycle"` (envs/snake_cycle.py): the board's cycle passes every cell once, each
next to the one before; and its features are enough to fill the board: a three-line rule that
reads nothing else wins every game. (The features themselves are checked against a plain-Python
Snake in tests/test_envs_snake_features.py.)"""

import pytest
import torch

from envs import make_vec_env
from envs.errors import EnvConfigError
from envs.snake_cycle import cycle_order
from envs.snake_space import SPACE_FEATURES

torch.set_num_threads(1)
CYCLE_START = 18 + SPACE_FEATURES


@pytest.mark.parametrize("height, width", [(4, 4), (5, 6), (6, 5), (10, 10), (12, 12), (8, 20)])
def test_the_cycle_passes_every_cell_once_each_next_to_the_one_before(height, width):
    order = cycle_order(height, width)
    assert sorted(order) == [(row, column) for row in range(height) for column in range(width)]
    for (row, column), (next_row, next_column) in zip(order, order[1:] + order[:1]):
        assert abs(row - next_row) + abs(column - next_column) == 1


def test_a_board_with_both_sides_odd_is_refused_with_the_reason():
    with pytest.raises(EnvConfigError, match="even number of rows or columns"):
        make_vec_env("snake", 2, grid_size=(7, 9), obs="cycle")


def _cut_ahead_rule(obs: torch.Tensor) -> torch.Tensor:
    """Of the moves that land before the tail on the cycle, the one nearest the food along it;
    while there is none (a new game's snake may lie across the cycle), the cycle's own move,
    which puts the body in order, or else the move with most room."""
    moves = obs[:, CYCLE_START:].view(-1, 3, 3)
    safe = moves[:, :, 1] > 0.5
    room = obs[:, 18:CYCLE_START].view(-1, 3, 4)[:, :, 0]
    fallback = 2.0 - room - 2.0 * moves[:, :, 0]
    return torch.where(safe.any(1, keepdim=True), torch.where(safe, moves[:, :, 2], 2.0), fallback).argmin(1)


@pytest.mark.parametrize("grid_size", [6, 10])
def test_the_cycle_features_alone_let_a_simple_rule_fill_the_board(grid_size):
    games = 32
    env = make_vec_env("snake", games, seed=5, grid_size=grid_size, obs="cycle", max_steps_without_food=500)
    obs = env.reset()
    finished = torch.zeros(games, dtype=torch.bool)
    won = torch.zeros(games, dtype=torch.bool)
    for _ in range(60 * grid_size * grid_size):
        length = env.length.clone()
        obs, reward, terminated, truncated, _ = env.step(_cut_ahead_rule(obs))
        ended = (terminated | truncated) & ~finished
        won |= ended & terminated & (length + (reward > 0).long() >= grid_size * grid_size)
        finished |= ended
        if finished.all():
            break
    assert finished.all(), "every game ended"
    assert int(won.sum()) == games, f"{int(won.sum())} of {games} games filled the board"


def test_reward_disorder_charges_exactly_the_moves_that_break_the_cycle_order():
    env = make_vec_env(
        "snake", 64, seed=3, grid_size=6, obs="cycle", reward_food=0.0, reward_death=0.0, reward_disorder=-0.5
    )
    obs = env.reset()
    generator = torch.Generator().manual_seed(0)
    charged = 0
    for _ in range(300):
        # Mostly the food's way along the cycle, whatever the order; now and then a random move.
        actions = torch.where(
            torch.rand(64, generator=generator) < 0.2,
            torch.randint(0, 3, (64,), generator=generator),
            obs[:, CYCLE_START + 2 :: 3].argmin(1),
        )
        safe = obs[:, CYCLE_START + 1 :: 3] > 0.5
        breaks = safe.any(1) & ~safe.gather(1, actions.view(-1, 1)).squeeze(1)
        obs, reward, *_ = env.step(actions)
        assert torch.equal(reward, torch.where(breaks, -0.5, 0.0))
        charged += int(breaks.sum())
    assert charged > 100  # the check saw many breaks, not only the empty case
    # The rule that keeps the order is never charged (and never crashes: every reward is 0).
    env = make_vec_env("snake", 16, seed=4, grid_size=6, obs="cycle", reward_food=0.0, reward_disorder=-1.0)
    obs = env.reset()
    for _ in range(300):
        obs, reward, *_ = env.step(_cut_ahead_rule(obs))
        assert torch.equal(reward, torch.zeros(16))


@pytest.mark.parametrize("options", [{"obs": "space"}, {"obs": "cycle", "action_mode": "absolute"}])
def test_reward_disorder_without_the_cycle_is_refused_with_the_reason(options):
    with pytest.raises(EnvConfigError, match="reward_disorder .* needs obs 'cycle' and action_mode 'relative'"):
        make_vec_env("snake", 2, grid_size=6, reward_disorder=-1.0, **options)
