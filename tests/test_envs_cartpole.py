"""Batched CartPole against Gymnasium's CartPole-v1: same physics, rewards, episode ends."""

import math

import gymnasium
import numpy as np
import pytest
import torch

from envs import make_vec_env
from envs.cartpole import CartPoleVecEnv

torch.set_num_threads(1)
NUM_ENVS = 16


def _gym_cartpoles(count: int, **kwargs) -> list[gymnasium.Env]:
    envs = [gymnasium.make("CartPole-v1", **kwargs) for _ in range(count)]
    for index, env in enumerate(envs):
        env.reset(seed=index)
    return envs


def _put_gym_in_state(gym_env: gymnasium.Env, state: np.ndarray, elapsed_steps: int) -> None:
    gym_env.reset()  # clears Gymnasium's "stepped after termination" bookkeeping
    gym_env.unwrapped.state = state.astype(np.float64)
    gym_env._elapsed_steps = elapsed_steps  # the TimeLimit wrapper's step counter


@pytest.mark.parametrize("sutton_barto_reward", [False, True])
def test_every_transition_matches_gymnasium(sutton_barto_reward):
    """4800 transitions: from each of our states, Gymnasium's CartPole-v1 takes the same action
    and lands on the same observation, reward, termination and truncation."""
    env = CartPoleVecEnv(NUM_ENVS, seed=0, sutton_barto_reward=sutton_barto_reward)
    gym_envs = _gym_cartpoles(NUM_ENVS, sutton_barto_reward=sutton_barto_reward)
    # Start some envs near the 500-step limit so truncation is compared too.
    env.episode_length[: NUM_ENVS // 2] = torch.arange(NUM_ENVS // 2, dtype=torch.float32) * 7 + 440
    actions_rng = np.random.default_rng(0)
    terminations = truncations = 0
    for _ in range(300):
        states = env.state.numpy().copy()
        lengths = env.episode_length.numpy().astype(int).copy()
        # The first half mostly balance (and reach the time limit), the rest act at random.
        balance = (states[:, 2] + 0.5 * states[:, 3] > 0).astype(np.int64)
        random_actions = actions_rng.integers(0, 2, NUM_ENVS)
        balancing_share = np.where(np.arange(NUM_ENVS) < NUM_ENVS // 2, 0.95, 0.0)
        actions = np.where(actions_rng.random(NUM_ENVS) < balancing_share, balance, random_actions)
        obs, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))
        for index, gym_env in enumerate(gym_envs):
            _put_gym_in_state(gym_env, states[index], lengths[index])
            gym_obs, gym_reward, gym_terminated, gym_truncated, _ = gym_env.step(int(actions[index]))
            np.testing.assert_allclose(info["final_obs"][index].numpy(), gym_obs, rtol=1e-5, atol=1e-6)
            assert reward[index].item() == gym_reward
            assert bool(terminated[index]) == gym_terminated
            assert bool(truncated[index]) == gym_truncated
        terminations += int(terminated.sum())
        truncations += int(truncated.sum())
    assert terminations > 20 and truncations >= NUM_ENVS // 2  # both kinds of episode end were checked


@pytest.mark.parametrize("start_seed", [0, 1])
def test_whole_episode_in_float64_matches_gymnasium_from_the_same_start(start_seed):
    """Free-running for a whole 500-step episode with precision="float64", the batched env
    follows Gymnasium step for step (float32 drifts: CartPole amplifies rounding)."""
    env = CartPoleVecEnv(1, seed=3, precision="float64")
    gym_env = gymnasium.make("CartPole-v1")
    gym_obs, _ = gym_env.reset(seed=start_seed)
    env.set_state(gym_env.unwrapped.state.reshape(1, 4))
    for step in range(1, 501):
        action = int(gym_obs[2] + 0.5 * gym_obs[3] > 0)
        obs, reward, terminated, truncated, info = env.step(torch.tensor([action]))
        gym_obs, gym_reward, gym_terminated, gym_truncated, _ = gym_env.step(action)
        np.testing.assert_allclose(info["final_obs"][0].numpy(), gym_obs, rtol=0, atol=1e-6)
        assert (bool(terminated[0]), bool(truncated[0])) == (gym_terminated, gym_truncated)
        if gym_terminated or gym_truncated:
            break
    assert step == 500 and gym_truncated  # the balancing policy survives to the time limit


def test_same_seed_same_trajectories_and_other_seed_differs():
    def rollout(seed):
        env = make_vec_env("cartpole", 8, seed=seed)
        observations = [env.reset()]
        action_generator = torch.Generator().manual_seed(1)
        for _ in range(100):
            observations.append(env.step(torch.randint(0, 2, (8,), generator=action_generator))[0])
        return torch.stack(observations)

    assert torch.equal(rollout(5), rollout(5))
    assert not torch.equal(rollout(5), rollout(6))


def test_reset_with_seed_restarts_the_same_episodes():
    env = make_vec_env("CartPole-v1", 4)
    first = env.reset(seed=11)
    env.step(torch.ones(4, dtype=torch.int64))
    assert torch.equal(env.reset(seed=11), first)


def test_auto_reset_returns_new_episode_and_keeps_final_obs():
    env = make_vec_env("cartpole", 4, seed=0)
    env.reset()
    pushes = torch.ones(4, dtype=torch.int64)  # always pushing right topples the pole
    finished_lengths = []
    lengths = torch.zeros(4)
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(pushes)
        lengths += 1
        for index in torch.nonzero(terminated).flatten().tolist():
            final = info["final_obs"][index]
            assert final[0].abs() > 2.4 or final[2].abs() > 12 * 2 * math.pi / 360, "final_obs is the fallen state"
            assert (obs[index].abs() <= 0.05).all(), "the returned observation starts the next episode"
            assert env.episode_length[index] == 0
            finished_lengths.append(lengths[index].item())
            lengths[index] = 0
    assert len(finished_lengths) >= 4
    summary = env.stats.drain()
    assert summary.count == len(finished_lengths)
    assert summary.length_mean == pytest.approx(np.mean(finished_lengths))
    assert summary.score_mean == pytest.approx(np.mean(finished_lengths))  # CartPole's score is its length
    assert summary.return_max == max(finished_lengths)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_step_returns_new_contiguous_tensors_the_next_step_leaves_alone(precision):
    """The caller may keep what step() returned (the rollout buffer does): later steps must not
    write into it, and observations are contiguous float32 (N, 4) either way."""
    env = CartPoleVecEnv(8, seed=0, precision=precision)
    pushes = torch.ones(8, dtype=torch.int64)
    kept = env.step(pushes)
    copies = [kept[0].clone(), kept[1].clone(), kept[2].clone(), kept[3].clone(), kept[4]["final_obs"].clone()]
    for _ in range(30):  # every env falls and restarts at least once
        env.step(pushes)
    for tensor, copy in zip([*kept[:4], kept[4]["final_obs"]], copies):
        assert torch.equal(tensor, copy)
    for obs in (kept[0], kept[4]["final_obs"]):
        assert obs.dtype == torch.float32 and obs.shape == (8, 4) and obs.is_contiguous()


def test_observation_and_action_spaces_match_gymnasium():
    env = make_vec_env("cartpole", 2)
    reference = gymnasium.make("CartPole-v1")
    assert env.single_action_space == reference.action_space
    np.testing.assert_array_equal(env.single_observation_space.high, reference.observation_space.high)
    obs = env.reset()
    assert obs.shape == (2, 4) and obs.dtype == torch.float32


def test_render_draws_the_cart_and_pole():
    env = make_vec_env("cartpole", 3, seed=0)
    frame = env.render(2)
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
    colours = {tuple(pixel) for pixel in frame.reshape(-1, 3)[::7]}
    assert (0, 0, 0) in colours and (202, 152, 101) in colours  # cart and pole
    with pytest.raises(Exception, match="render index"):
        env.render(3)
