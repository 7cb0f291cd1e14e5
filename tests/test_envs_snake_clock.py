"""Snake's clock-time board: rebasing the clock and big (int32) boards do not change the games."""

import torch

from envs import make_vec_env

torch.set_num_threads(1)


def _play(env, steps=300):
    generator = torch.Generator().manual_seed(0)
    observations = [env.reset(seed=5)]
    for _ in range(steps):
        observations.append(env.step(torch.randint(0, 3, (env.num_envs,), generator=generator))[0])
    return torch.stack(observations)


def test_rebasing_the_clock_often_plays_the_same_games():
    usual = make_vec_env("snake", 16, seed=5, grid_size=6)
    often = make_vec_env("snake", 16, seed=5, grid_size=6)
    often._rebase_period = 3  # every third step instead of every few hundred
    assert torch.equal(_play(usual), _play(often))
    assert usual.stats.drain() == often.stats.drain()


def test_big_boards_use_wide_times_and_keep_the_rules():
    env = make_vec_env("snake", 8, seed=5, grid_size=40, max_steps_without_food=3)
    assert env.board.dtype == torch.int32, "int16 times would need rebasing every step"
    obs = _play(env, steps=60)  # a game ends every 3 steps: the clock jumps a lot
    assert obs.shape == (61, 8, 18) and obs.min() >= -1 and obs.max() <= 1
    counts = env.field_counts()
    assert (counts.flatten(1).max(1).values == env.length).all(), "the head holds the length"
    assert ((counts > 0).flatten(1).sum(1) <= env.length).all(), "no stale body left from old games"
