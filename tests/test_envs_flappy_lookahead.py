"""Flappy Bird's `obs: lookahead`: the predicted heights at the next pipes are where the env's own
physics puts the bird, falling freely or after one flap."""

import torch

from envs import make_vec_env
from envs.flappy_bird import HALF_FIELD
from envs.flappy_bird_screen import BIRD_HEIGHT, BIRD_WIDTH, BIRD_X, GROUND_Y, PIPE_WIDTH

torch.set_num_threads(1)
ENVS = 256


def _replay(env, actions_before: list[torch.Tensor], first_action: int, pipe_x: torch.Tensor) -> torch.Tensor:
    """Each env's bird height on the step the pipe whose left edge was at `pipe_x` first overlaps
    it, taking `first_action` now and never flapping after; NaN where the game ended first."""
    env.reset()
    for actions in actions_before:
        env.step(actions)
    heights = torch.full((ENVS,), float("nan"))
    alive = torch.ones(ENVS, dtype=torch.bool)
    for step in range(1, 80):
        action = first_action if step == 1 else 0
        _, _, terminated, truncated, info = env.step(torch.full((ENVS,), action, dtype=torch.int64))
        overlapping_now = (pipe_x - step * env.pipe_speed < BIRD_X + BIRD_WIDTH) & heights.isnan() & alive
        alive &= ~(terminated | truncated)
        # The step the pipe reaches the bird: its height then, whether or not the bird crashed on it
        # (the observation the game ended on: the bird's centre, from -1 at the top to +1).
        bird_y = (info["final_obs"][:, 0] + 1) * HALF_FIELD - BIRD_HEIGHT / 2
        heights = torch.where(overlapping_now, bird_y, heights)
    return heights


def test_lookahead_heights_are_where_the_bird_meets_the_next_pipes():
    generator = torch.Generator().manual_seed(0)
    env = make_vec_env("flappy_bird", ENVS, seed=3, obs="lookahead", gap_size=150)
    obs = env.reset()
    actions_before = []
    for _ in range(int(torch.randint(60, 120, (1,), generator=generator))):
        # Follow the gaps, with a random flap now and then: birds at every height and speed.
        actions = ((obs[:, 4] < 25 / HALF_FIELD) | (torch.rand(ENVS, generator=generator) < 0.05)).long()
        actions_before.append(actions)
        obs, *_ = env.step(actions)
    assert obs.shape == (ENVS, 12) and env.single_observation_space.shape == (12,)
    pipe_x_all = env.pipe_offset.unsqueeze(1) + torch.arange(env.num_pipes) * env.pipe_spacing
    next_index = (pipe_x_all + PIPE_WIDTH <= BIRD_X).sum(1)
    checked = 0
    for ahead in range(2):
        index = (next_index + ahead).unsqueeze(1)
        pipe_x = pipe_x_all.gather(1, index).squeeze(1)
        gap_top = env.gap_tops.gather(1, index).squeeze(1)
        for first_action, column in ((0, 8 + 2 * ahead), (1, 9 + 2 * ahead)):
            state = [actions.clone() for actions in actions_before]
            replayed = _replay(
                make_vec_env("flappy_bird", ENVS, seed=3, obs="lookahead", gap_size=150), state, first_action, pipe_x
            )
            predicted = obs[:, column] * env.gap_room + gap_top  # the gap's unit: 0 top edge, 1 bottom
            # Reached in play, and neither the feature nor the bird (on the ground) clamped.
            comparable = ~replayed.isnan() & (obs[:, column].abs() < 2) & (replayed < GROUND_Y - BIRD_HEIGHT)
            assert comparable.sum() > ENVS // 8, (ahead, first_action, int(comparable.sum()))
            assert torch.allclose(predicted[comparable], replayed[comparable], atol=1e-3)
            checked += int(comparable.sum())
    assert checked > ENVS


def test_a_new_game_starts_with_the_lookahead_the_step_would_compute():
    # A crashed bird's next observation comes from the shortcut for new games (`_new_game_obs`);
    # it must equal the full computation from the new game's state.
    env = make_vec_env("flappy_bird", 64, seed=1, obs="lookahead")
    obs = env.reset()
    restarted = 0
    for _ in range(120):
        obs, _, terminated, truncated, _ = env.step((obs[:, 4] < 25 / HALF_FIELD).long())
        restarted += int((terminated | truncated).sum())
        assert torch.equal(obs, env._vector_obs(env.bird_y, env.bird_velocity, env.pipe_offset, env._gaps))
    assert restarted > 0
