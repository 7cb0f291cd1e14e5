"""The registry (names, aliases, errors) and the Gymnasium adapter (sync, async, wrappers)."""

import gymnasium
import numpy as np
import pytest
import torch

import envs
from envs import EnvConfigError, UnknownEnvError, builtin_env_names, make_vec_env, resolve_env_name
from envs.cartpole import CartPoleVecEnv
from envs.flappy_bird import FlappyBirdVecEnv
from envs.gym_vec import GymVecEnv
from envs.snake import SnakeVecEnv

torch.set_num_threads(1)


def test_builtin_names_and_aliases():
    assert builtin_env_names() == ["cartpole", "flappy_bird", "snake"]
    for alias, canonical in [
        ("CartPole-v1", "cartpole"),
        ("FlappyBird-v0", "flappy_bird"),
        ("FlappyBirdPygame-v0", "flappy_bird"),
        ("flappybird", "flappy_bird"),
        ("Snake-v0", "snake"),
        ("SNAKE", "snake"),
    ]:
        assert resolve_env_name(alias) == canonical
    assert isinstance(make_vec_env("FlappyBirdPygame-v0", 2), FlappyBirdVecEnv)
    assert isinstance(make_vec_env("CartPole-v1", 2), CartPoleVecEnv)
    assert isinstance(make_vec_env("Snake-v0", 2), SnakeVecEnv)


def test_unknown_name_lists_the_names_and_the_closest_match():
    with pytest.raises(UnknownEnvError) as error:
        make_vec_env("flapy_bird", 2)
    message = str(error.value)
    assert "Did you mean 'flappy_bird'?" in message
    assert "cartpole, flappy_bird, snake" in message
    with pytest.raises(UnknownEnvError, match="Did you mean 'Acrobot-v1'"):
        make_vec_env("Acrobat-v1", 2)
    assert issubclass(UnknownEnvError, envs.EnvError)


def test_bad_kwargs_name_the_key():
    with pytest.raises(EnvConfigError, match="'gap_sise'.*Did you mean 'gap_size'"):
        make_vec_env("flappy_bird", 2, gap_sise=120)
    with pytest.raises(EnvConfigError, match="'gravity'"):
        make_vec_env("Acrobot-v1", 2, gravity=3)
    with pytest.raises(EnvConfigError, match="num_envs must be a positive integer, got -4"):
        make_vec_env("cartpole", -4)
    with pytest.raises(EnvConfigError, match="vector_env"):
        make_vec_env("cartpole", 2, vector_env="threads")
    with pytest.raises(EnvConfigError, match="nope.module"):
        make_vec_env("CartPole-v1", 2, wrappers=["nope.module:Wrapper"])


def test_our_games_are_gymnasium_citizens():
    for env_id in ("FlappyBird-v0", "Snake-v0"):
        env = gymnasium.make(env_id, render_mode="rgb_array")
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        for _ in range(500):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            if terminated or truncated:
                break
        assert terminated, "random play ends in a crash"
        assert "score" in info
        frame = env.render()
        assert frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 10
        env.close()
    same_seed = [gymnasium.make("Snake-v0").reset(seed=4)[0] for _ in range(2)]
    np.testing.assert_array_equal(*same_seed)


def test_adapter_with_a_discrete_env_feeds_episode_stats():
    env = make_vec_env("Acrobot-v1", 3, seed=0, max_episode_steps=50)
    assert isinstance(env, GymVecEnv)
    obs = env.reset()
    assert obs.shape == (3, 6) and obs.dtype == torch.float32
    for step in range(50):
        obs, reward, terminated, truncated, info = env.step(torch.randint(0, 3, (3,)))
    assert truncated.all() and (reward == -1).all()
    assert not torch.equal(info["final_obs"], obs), "final_obs is the last state, obs the new start"
    summary = env.stats.drain()
    assert summary.count == 3 and summary.return_mean == -50 and summary.score_mean == -50  # score = return
    assert env.render(2).shape == (500, 500, 3)
    env.close()


def test_adapter_with_a_continuous_env():
    env = make_vec_env("Pendulum-v1", 2, seed=0)
    assert isinstance(env.single_action_space, gymnasium.spaces.Box)
    obs = env.reset(seed=0)
    for _ in range(200):
        obs, reward, terminated, truncated, _ = env.step(torch.full((2, 1), 2.0))
    assert truncated.all() and (reward <= 0).all() and obs.shape == (2, 3)
    assert env.stats.drain().length_mean == 200
    env.close()


def test_adapter_same_seed_same_trajectories():
    def rollout():
        env = make_vec_env("gym:CartPole-v1", 2, seed=9)
        observations = [env.reset()]
        for step in range(60):
            observations.append(env.step(torch.tensor([step % 2, 1]))[0])
        env.close()
        return torch.stack(observations)

    assert torch.equal(rollout(), rollout())


def test_gym_prefix_forces_the_adapter_even_for_builtins():
    env = make_vec_env("gym:flappy_bird", 2, seed=0)
    assert isinstance(env, GymVecEnv) and env.name == "FlappyBird-v0"
    assert env.single_observation_space.shape == (8,)
    env.close()


def test_async_adapter_with_two_workers():
    env = make_vec_env("CartPole-v1", 4, seed=0, vector_env="async", num_workers=2)
    assert env.mode == "async"
    env.reset()
    for _ in range(100):
        env.step(torch.randint(0, 2, (4,)))
    summary = env.stats.drain()
    assert summary.count >= 4 and 8 < summary.length_mean < 60  # random CartPole episodes
    env.close()


def test_user_wrappers_and_entry_point_envs_and_reported_scores():
    plain = make_vec_env("envs_helpers:ScoringEnv", 2, seed=0, episode_length=3)
    doubled = make_vec_env(
        "envs_helpers:ScoringEnv", 2, seed=0, episode_length=3, wrappers=["envs_helpers:DoubleRewardWrapper"]
    )
    for env in (plain, doubled):
        env.reset()
        for _ in range(6):
            _, _, terminated, _, info = env.step(torch.zeros(2, dtype=torch.int64))
        assert terminated.all() and info["final_obs"][:, 0].tolist() == [3.0, 3.0]
    plain_summary, doubled_summary = plain.stats.drain(), doubled.stats.drain()
    assert plain_summary.count == doubled_summary.count == 4
    assert plain_summary.return_mean == 3 and doubled_summary.return_mean == 6
    assert plain_summary.score_mean == 7, "the env's own info['score'] is the score"


def test_wrappers_turn_a_builtin_into_a_gymnasium_vector_env():
    """The wrapped Snake plays the same games as the unwrapped adapter (same seed, same actions)
    and every reward, +1 for a food and -1 for a crash alike, is exactly doubled."""
    plain = make_vec_env("snake", 4, seed=0, vector_env="sync")
    doubled = make_vec_env("snake", 4, seed=0, wrappers=["envs_helpers:DoubleRewardWrapper"])
    assert isinstance(doubled, GymVecEnv) and doubled.name == "Snake-v0"
    torch.testing.assert_close(doubled.reset(), plain.reset())
    generator = torch.Generator().manual_seed(0)
    rewards_seen = set()
    for _ in range(300):
        actions = torch.randint(0, 3, (4,), generator=generator)
        plain_obs, plain_reward, plain_terminated, *_ = plain.step(actions)
        obs, reward, terminated, *_ = doubled.step(actions)
        torch.testing.assert_close(obs, plain_obs)
        assert torch.equal(terminated, plain_terminated)
        torch.testing.assert_close(reward, 2 * plain_reward, rtol=0, atol=0)
        rewards_seen.update(plain_reward.tolist())
    assert {-1.0, 1.0} <= rewards_seen, f"the games must eat and crash to show the doubling, saw {rewards_seen}"
    plain_summary, doubled_summary = plain.stats.drain(), doubled.stats.drain()
    assert doubled_summary.count == plain_summary.count > 0
    assert doubled_summary.return_mean == pytest.approx(2 * plain_summary.return_mean)
    assert doubled_summary.score_mean == plain_summary.score_mean, "the score (food eaten) is the game's own"
    plain.close()
    doubled.close()
