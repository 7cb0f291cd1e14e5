"""benchmarks/snake_ends.py: it sorts games by how they ended, and reads the food's reach back."""

import torch

from benchmarks.snake_ends import ENDINGS, analyse, report

STRAIGHT, LEFT = 0, 1


def test_a_snake_that_never_turns_crashes_every_game_into_the_wall():
    result = analyse(lambda obs: torch.full((len(obs),), STRAIGHT), games=16, grid_size=6)
    crashed = result["endings"]["crashed"]
    assert len(crashed) == 16 and all(3 <= length <= 5 for length in crashed)  # food on its way: longer
    assert result["endings"]["won"] == result["endings"]["starved"] == []
    assert result["food_in_reach_when_starved"] is None  # the vector observation has no reach to read


def test_a_snake_that_circles_starves_and_the_food_was_in_reach():
    # Turning left every step circles a 2 x 2 square: safe at length 3 or 4, until the hunger limit.
    result = analyse(
        lambda obs: torch.full((len(obs),), LEFT), games=32, grid_size=6, obs="space", max_steps_without_food=20
    )
    endings = result["endings"]
    assert sum(len(lengths) for lengths in endings.values()) == 32
    assert len(endings["starved"]) >= 24 and endings["won"] == []
    # The food lies somewhere on an open 6 x 6 board: in reach of some move nearly always.
    assert result["food_in_reach_when_starved"] > 0.9
    text = report(result)
    assert all(f"| {kind} |" in text for kind in ENDINGS) and "hunger limit 20 steps" in text


def test_the_cycle_order_a_model_breaks_is_read_back_from_its_observations():
    from test_envs_snake_cycle import CYCLE_START, _cut_ahead_rule

    # The rule that keeps the body in cycle order fills the board and never breaks the order ...
    careful = analyse(_cut_ahead_rule, games=8, grid_size=6, obs="cycle", max_steps_without_food=200)
    assert len(careful["endings"]["won"]) == 8 and careful["first_break"]["won"] == [0] * 8
    # ... one that heads for the food along the cycle whatever the order breaks it, while short.
    greedy = analyse(
        lambda obs: obs[:, CYCLE_START + 2 :: 3].argmin(1),
        games=32,
        grid_size=6,
        obs="cycle",
        max_steps_without_food=200,
    )
    breaks = [length for lengths in greedy["first_break"].values() for length in lengths if length > 0]
    assert len(breaks) >= 16 and all(1 <= length < 36 for length in breaks)
    assert "broke the cycle order" in report(greedy) and "broke the cycle order" not in report(
        analyse(lambda obs: torch.full((len(obs),), STRAIGHT), games=4, grid_size=6)
    )
