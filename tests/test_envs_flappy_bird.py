"""Flappy Bird: physics, pipes and score, rewards, truncation, observations, rendering."""

import numpy as np
import pytest
import torch

from envs import EnvConfigError, make_vec_env
from envs.flappy_bird import GROUND_Y, HALF_FIELD, SCREEN_WIDTH

torch.set_num_threads(1)
NO_FLAP = 0
FLAP = 1


def _gap_follower(obs: torch.Tensor) -> torch.Tensor:
    """Flap when the bird's centre drops to 25 px above the next gap's bottom edge."""
    return (obs[:, 4] < 25 / HALF_FIELD).long()


def test_a_bird_that_never_flaps_falls_to_the_ground():
    env = make_vec_env("flappy_bird", 2, seed=0)
    start = env.reset()
    rewards = []
    for step in range(1, 40):
        obs, reward, terminated, truncated, info = env.step(torch.full((2,), NO_FLAP))
        rewards.append(reward[0].item())
        if terminated.any():
            break
    # From y=244 at rest, falling 1, 2, ... 10, 10 px per step reaches the ground (y=380) on step 19.
    assert step == 19 and terminated.all() and not truncated.any()
    assert rewards[:-1] == pytest.approx([0.1] * 18) and rewards[-1] == pytest.approx(-5.0)
    final_bird_height = info["final_obs"][0, 0].item()
    assert final_bird_height > 0.9, "the final observation shows the bird on the ground"
    assert torch.equal(obs[:, :2], start[:, :2]), "auto-reset: the new bird is back at its start, at rest"


def test_flapping_lifts_the_bird_and_the_ceiling_stops_it():
    env = make_vec_env("flappy_bird", 1, seed=0)
    obs = env.reset()
    obs, *_ = env.step(torch.tensor([FLAP]))
    assert obs[0, 1].item() == pytest.approx(-0.9)  # speed -9 px/step, normalised by 10
    for _ in range(30):
        obs, _, terminated, *_ = env.step(torch.tensor([FLAP]))
        assert not terminated.any()
    assert env.bird_y[0].item() == 0.0, "the bird stays at the top of the screen"


def test_a_gap_following_bird_passes_pipes_and_is_rewarded():
    env = make_vec_env("flappy_bird", 8, seed=1)
    obs = env.reset()
    total_rewards = torch.zeros(8)
    for _ in range(400):
        obs, reward, terminated, truncated, _ = env.step(_gap_follower(obs))
        total_rewards += reward
    assert env.game_score().max() >= 3, "pipes are passable and counted"
    summary = env.stats.drain()
    passed = env.game_score()
    # Rewards add up: 0.1 per step alive plus 10 per pipe (nothing finished or all accounted for).
    if summary.count == 0:
        assert torch.allclose(total_rewards, 0.1 * 400 + 10 * passed, atol=1e-3)
    else:
        assert summary.score_max >= 1 and summary.return_max > 10


def test_reward_weights_are_configurable():
    env = make_vec_env("flappy_bird", 4, seed=2, reward_alive=0.0, reward_pipe=1.0, reward_death=-1.0)
    obs = env.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(2000):  # a sloppy gap follower: passes some pipes, then crashes
        sloppy = torch.rand(4, generator=generator) < 0.1
        obs, reward, terminated, *_ = env.step(_gap_follower(obs) ^ sloppy.long())
        if terminated.any():
            break
    finished = terminated.nonzero().flatten()
    assert set(reward[finished].tolist()) <= {-1.0, 0.0}  # death (-1), possibly with a pipe (+1)
    summary = env.stats.drain()
    assert summary.count == len(finished)
    assert summary.return_mean == pytest.approx(summary.score_mean - 1.0)


def test_episodes_are_truncated_at_max_steps():
    env = make_vec_env("flappy_bird", 3, seed=0, max_steps=30)
    obs = env.reset()
    for step in range(1, 31):
        obs, reward, terminated, truncated, _ = env.step((obs[:, 0] > 0).long())  # hover mid-screen
        assert not terminated.any()
    assert truncated.all() and env.stats.drain().length_mean == 30


def test_difficulty_knobs_change_the_game():
    env = make_vec_env("flappy_bird", 1, seed=0, gap_size=150, pipe_speed=6)
    obs = env.reset()
    assert (obs[0, 4] - obs[0, 3]).item() * HALF_FIELD == pytest.approx(150)
    next_obs, *_ = env.step(torch.tensor([FLAP]))
    assert (obs[0, 2] - next_obs[0, 2]).item() * SCREEN_WIDTH == pytest.approx(6)
    with pytest.raises(EnvConfigError, match="gap_size"):
        make_vec_env("flappy_bird", 1, gap_size=10)
    with pytest.raises(EnvConfigError, match="obs"):
        make_vec_env("flappy_bird", 1, obs="rgb")


def test_vector_observations_are_normalised():
    env = make_vec_env("flappy_bird", 64, seed=0)
    obs = env.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        obs, *_ = env.step(torch.randint(0, 2, (64,), generator=generator))
        assert obs.shape == (64, 8) and obs.dtype == torch.float32
        assert obs.abs().max() <= 2.0 and env.single_observation_space.contains(obs[0].numpy())


def test_same_seed_same_pipes_other_seed_different():
    def gaps(seed):
        env = make_vec_env("flappy_bird", 4, seed=seed)
        env.reset()
        for _ in range(100):
            env.step(torch.zeros(4, dtype=torch.int64))
        return env.gap_tops.clone()

    assert torch.equal(gaps(3), gaps(3))
    assert not torch.equal(gaps(3), gaps(4))


def test_pixel_observations_show_bird_pipes_and_ground_and_stack_frames():
    env = make_vec_env("flappy_bird", 2, seed=0, obs="pixels")
    assert env.single_observation_space.shape == (2, 84, 84)
    obs = env.reset()
    for _ in range(45):  # the first pipe scrolls into view
        previous = obs
        obs, *_ = env.step(torch.tensor([NO_FLAP, FLAP]))
    assert obs.shape == (2, 2, 84, 84) and 0.0 <= obs.min() and obs.max() <= 1.0
    frame = obs[0, -1].numpy()
    for value, what in ((0.0, "sky"), (0.3, "ground"), (0.6, "pipe"), (1.0, "bird")):
        assert np.isclose(frame, value).any(), f"the frame shows the {what}"
    assert torch.equal(obs[:, 0], previous[:, 1]), "channel 0 is the previous frame"
    assert not torch.equal(obs[0, -1], obs[1, -1]), "the two birds are at different heights"


def test_render_looks_like_flappy_bird():
    env = make_vec_env("flappy_bird", 2, seed=0)
    obs = env.reset()
    for _ in range(60):
        obs, *_ = env.step(_gap_follower(obs))
    frame = env.render(1)
    assert frame.shape == (512, 288, 3) and frame.dtype == np.uint8
    pixels = frame.reshape(-1, 3)
    colours = {tuple(p) for p in pixels}
    assert (78, 192, 202) in colours, "sky"
    assert (115, 191, 46) in colours, "green pipes"
    assert (250, 204, 38) in colours, "yellow bird"
    ground = frame[GROUND_Y + 20 :]
    assert (ground == np.array([222, 216, 149], dtype=np.uint8)).all(axis=2).mean() > 0.9, "sandy ground strip"
    assert (frame[20:100, 100:190] == 255).all(axis=2).any(), "white score digits at the top"


def test_pixel_observations_restart_with_the_first_picture_after_a_crash():
    env = make_vec_env("flappy_bird", 2, seed=0, obs="pixels", frame_stack=3)
    start = env.reset()
    for _ in range(19):  # no flaps: the birds hit the ground on step 19
        obs, _, terminated, _, info = env.step(torch.tensor([NO_FLAP, NO_FLAP]))
    assert terminated.all()
    assert torch.equal(obs, start), "a new game starts from the start picture"
    bird_rows = (info["final_obs"][0, -1] == 1.0).any(dim=1).nonzero().flatten()
    assert bird_rows.float().mean() > 84 * 0.7, "the final frame shows the bird down at the ground"


def _spawned_pairs(hard_pipes: float, steps: int = 600) -> tuple[torch.Tensor, torch.Tensor]:
    """(gap before, spawned gap) for every pipe spawned during a game (not at a restart)."""
    env = make_vec_env("flappy_bird", 64, seed=5, hard_pipes=hard_pipes)
    obs = env.reset()
    before, spawned = [], []
    for _ in range(steps):
        last_gap, offset = env.gap_tops[:, -1].clone(), env.pipe_offset.clone()
        obs, _, terminated, truncated, _ = env.step(_gap_follower(obs))
        shifted = (env.pipe_offset > offset) & ~(terminated | truncated)
        before.append(last_gap[shifted])
        spawned.append(env.gap_tops[shifted, -1])
    return torch.cat(before), torch.cat(spawned)


def test_hard_pipes_put_that_share_of_gaps_at_the_far_end_from_the_one_before():
    env = make_vec_env("flappy_bird", 1, seed=0)
    low, high = env.gap_top_min, env.gap_top_min + env.gap_top_range - 1  # top of the highest / lowest gap
    slack = 0.15 * env.gap_top_range + 1  # and the whole pixels gap tops are floored to

    def far_end(before, spawned):
        last_is_high = before < env.gap_top_min + env.gap_top_range / 2
        return torch.where(last_is_high, spawned >= high - slack, spawned <= low + slack)

    before, spawned = _spawned_pairs(1.0)
    assert len(spawned) > 500 and far_end(before, spawned).all()
    assert spawned.min() >= low and spawned.max() <= high
    assert (spawned - before).abs().float().mean() > 100  # a drop or climb of most of the range each time
    before, spawned = _spawned_pairs(0.5)
    share = far_end(before, spawned).float().mean().item()
    assert 0.55 < share < 0.70  # the hard half, and the uniform half's own share of the far ends
    before, spawned = _spawned_pairs(0.0)
    assert far_end(before, spawned).float().mean().item() < 0.25  # uniform: about 15%
    with pytest.raises(EnvConfigError, match="hard_pipes"):
        make_vec_env("flappy_bird", 1, hard_pipes=1.5)
