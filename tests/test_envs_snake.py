"""Snake: moving, eating and growing, walls, its own body, hunger, observations, rendering."""

import numpy as np
import pytest
import torch

from envs import EnvConfigError, make_vec_env

torch.set_num_threads(1)
UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3  # absolute actions
STRAIGHT, TURN_LEFT, TURN_RIGHT = 0, 1, 2  # relative actions


def _snake(num_envs=1, **kwargs):
    """A snake in the centre of a 12 x 12 board (row 6, column 6), heading right."""
    env = make_vec_env("snake", num_envs, seed=0, action_mode="absolute", **kwargs)
    env.reset()
    env.heading.fill_(RIGHT)
    return env


def _act(env, action):
    return env.step(torch.full((env.num_envs,), action))


def test_running_into_the_wall_ends_the_game():
    env = _snake()
    env.set_food(11, 0)  # out of the way
    for step in range(1, 20):
        obs, reward, terminated, truncated, info = _act(env, UP)
        if terminated.any():
            break
    assert step == 7, "rows 5..0 are free, the 7th move up leaves the board"
    assert reward.item() == -1.0 and not truncated.any()
    assert info["final_obs"][0, 0].item() == 1.0, "danger straight ahead at the wall"
    assert env.stats.drain().count == 1


def test_eating_grows_the_snake_and_scores():
    env = _snake()
    env.set_food(6, 7)
    obs, reward, terminated, truncated, _ = _act(env, RIGHT)
    assert reward.item() == 1.0 and not terminated.any()
    assert env.length.item() == 4 and env.game_score().item() == 1
    food = env.food.item()
    assert food >= 0 and food != env.board_index(6, 7), "a new food appeared elsewhere"
    row, column = env.position(env.food)
    assert env.field_counts()[0, row, column].item() == 0, "not on the snake"


def test_running_into_its_own_body_ends_the_game():
    env = _snake()
    env.heading.fill_(UP)
    env.set_food(5, 6)
    _act(env, UP)
    env.set_food(4, 6)
    _act(env, UP)  # length 5 now
    env.set_food(11, 11)
    for action in (RIGHT, DOWN):
        _, _, terminated, *_ = _act(env, action)
        assert not terminated.any()
    _, reward, terminated, *_ = _act(env, LEFT)  # back into its own body
    assert terminated.all() and reward.item() == -1.0


def test_following_its_own_tail_is_safe_and_hunger_truncates():
    env = _snake(max_steps_without_food=20)
    env.heading.fill_(UP)
    env.set_food(5, 6)
    _act(env, UP)  # length 4: it can circle a 2 x 2 square, entering the cell its tail leaves
    env.set_food(0, 0)
    circle = [RIGHT, DOWN, LEFT, UP]
    for step in range(20):
        _, reward, terminated, truncated, _ = _act(env, circle[step % 4])
        assert not terminated.any()
    assert truncated.all() and reward.item() == 0.0
    summary = env.stats.drain()
    assert summary.count == 1 and summary.score_mean == 1 and summary.length_mean == 21


def test_with_hunger_kills_starving_ends_the_game_as_a_crash():
    env = _snake(max_steps_without_food=6, hunger_kills=True)
    env.heading.fill_(UP)
    env.set_food(0, 0)
    circle = [RIGHT, DOWN, LEFT, UP]
    for step in range(5):
        _, reward, terminated, truncated, _ = _act(env, circle[step % 4])
        assert not (terminated.any() or truncated.any())
    _, reward, terminated, truncated, _ = _act(env, circle[1])
    assert terminated.all() and not truncated.any() and reward.item() == -1.0
    with pytest.raises(EnvConfigError, match="hunger_kills"):
        _snake(hunger_kills="yes")


def test_relative_actions_turn_the_snake():
    env = make_vec_env("snake", 1, seed=0)
    env.reset()
    env.heading.fill_(UP)
    obs, *_ = env.step(torch.tensor([TURN_RIGHT]))
    assert env.heading.item() == RIGHT and obs[0, 6:10].tolist() == [0, 1, 0, 0]
    env.step(torch.tensor([TURN_LEFT]))
    assert env.heading.item() == UP
    env.step(torch.tensor([STRAIGHT]))
    assert env.heading.item() == UP and (env.head_row.item(), env.head_column.item()) == (4, 7)


def test_food_is_never_placed_on_the_snake_and_observations_stay_in_range():
    env = make_vec_env("snake", 64, seed=1, grid_size=6)
    obs = env.reset()
    generator = torch.Generator().manual_seed(0)
    eaten = 0
    for _ in range(400):
        obs, reward, *_ = env.step(torch.randint(0, 3, (64,), generator=generator))
        eaten += int((reward > 0).sum())
        food_row, food_column = env.position(env.food)
        has_food = food_row >= 0
        counts = env.field_counts()[torch.arange(64), food_row.clamp(min=0), food_column.clamp(min=0)]
        assert (counts[has_food] == 0).all()
        assert obs.shape == (64, 18) and obs.min() >= -1 and obs.max() <= 1
    assert eaten > 50


def test_same_seed_same_games():
    def play(seed):
        env = make_vec_env("snake", 8, seed=seed)
        observations = [env.reset()]
        generator = torch.Generator().manual_seed(0)
        for _ in range(200):
            observations.append(env.step(torch.randint(0, 3, (8,), generator=generator))[0])
        return torch.stack(observations)

    assert torch.equal(play(2), play(2))
    assert not torch.equal(play(2), play(3))


def test_vector_observation_of_a_known_board():
    """Head in the top row at column 1, heading left, body behind it on row 0, food in the far
    corner: every feature worked out from the docstring of envs/snake.py."""
    env = _snake()
    env.set_food(11, 11)
    for action in [UP] * 6 + [LEFT] * 5:  # (6, 6) -> (0, 6) -> (0, 1): 11 steps without food
        obs, _, terminated, *_ = _act(env, action)
        assert not terminated.any()
    assert env.body_cells(0) == [(0, 1), (0, 2), (0, 3)]
    expected = [
        0,
        0,
        1,  # one cell straight (0, 0) free, left (1, 1) free, right (-1, 1) the wall
        1,
        0,
        1,  # two cells: straight (0, -1) the wall, left (2, 1) free, right (-2, 1) the wall
        0,
        0,
        0,
        1,  # heading left
        0,
        1,
        1,
        0,  # the food is right of and below the head
        (11 - 1) / 12,
        (11 - 0) / 12,  # food column and row minus the head's, over width and height
        3 / 144,
        11 / 244,
    ]  # length over 12 x 12 cells; hunger over max_steps_without_food (100 + 144)
    torch.testing.assert_close(obs[0], torch.tensor(expected, dtype=torch.float32))


def test_grid_observation_planes():
    env = make_vec_env("snake", 2, seed=0, obs="grid", grid_size=(8, 10))
    assert env.single_observation_space.shape == (3, 8, 10)
    obs = env.reset()
    for _ in range(3):
        obs, *_ = env.step(torch.zeros(2, dtype=torch.int64))
    body, head, food = obs[0]
    assert head.sum() == 1 and head[env.head_row[0], env.head_column[0]] == 1
    assert body.max() == 1 and (body > 0).sum() == 3, "head plus two body cells, fading to the tail"
    assert food.sum() == 1 and body[food == 1].item() == 0


def test_bad_options_are_named():
    with pytest.raises(EnvConfigError, match="grid_size"):
        make_vec_env("snake", 1, grid_size=2)
    with pytest.raises(EnvConfigError, match="action_mode"):
        make_vec_env("snake", 1, action_mode="diagonal")


def test_render_looks_like_snake():
    env = _snake()
    env.set_food(6, 7)
    _act(env, RIGHT)
    _act(env, RIGHT)
    frame = env.render(0)
    assert frame.shape == (428, 384, 3) and frame.dtype == np.uint8
    colours = {tuple(p) for p in frame.reshape(-1, 3)}
    assert {(170, 215, 81), (162, 209, 73)} <= colours, "checkered grass"
    assert (52, 90, 210) in colours and (78, 124, 246) in colours, "head darker than the body"
    assert (231, 71, 29) in colours, "red food"
    score_bar = frame[:44]
    assert (score_bar == 255).all(axis=2).sum() > 50, "white score text"


def test_rendering_survives_someone_calling_pygame_quit():
    """Gymnasium's own envs call pygame.quit() on close; our cached fonts must not crash after it."""
    import pygame

    env = _snake()
    env.set_food(6, 7)
    _act(env, RIGHT)  # score 1: the bar has text to draw
    before = env.render(0)
    pygame.quit()
    after = env.render(0)
    assert (after[:44] == 255).all(axis=2).sum() > 50, "the score text is drawn again"
    np.testing.assert_array_equal(after, before)
