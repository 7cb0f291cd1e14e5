"""Rollout collection and scoring: what the update receives from the env loop."""
import torch

from envs.cartpole import CartPoleVecEnv
from trainer.nets.policies import build_policy
from trainer.nets.spec import make_policy_spec
from trainer.algos.rollout import RolloutBuffer, collect_rollout, score_rollout


def test_a_scored_rollout_holds_consistent_steps_pi_old_v_old_and_time_limit_bootstraps(test_device):
    gamma, num_steps, num_envs = 0.9, 60, 8
    env = CartPoleVecEnv(num_envs, device=test_device, seed=3, max_episode_steps=20)  # truncations and terminations
    spec = make_policy_spec("ppo-small", env.single_observation_space, env.single_action_space)
    policy = build_policy(spec).to(test_device)
    buffer = RolloutBuffer.allocate(num_steps, num_envs, (4,), policy, torch.device(test_device))
    start_obs = env.reset(seed=3)
    generator = torch.Generator(device=test_device).manual_seed(0)
    next_obs = collect_rollout(env, policy, buffer, start_obs, generator, None)
    score_rollout(policy, buffer, gamma)

    assert torch.equal(buffer.obs[0], start_obs)
    not_done = ~(buffer.terminated | buffer.truncated)
    # A step that did not end an episode leads to the next step's observation.
    assert torch.equal(buffer.final_obs[:-1][not_done[:-1]], buffer.obs[1:][not_done[:-1]])
    assert torch.equal(buffer.dones.bool(), ~not_done)
    assert buffer.truncated.any() and buffer.terminated.any()
    with torch.no_grad():
        flat_obs, flat_actions = buffer.obs.reshape(-1, 4), buffer.actions.reshape(-1)
        log_prob, _, value = policy.evaluate(flat_obs, flat_actions)
        final_values = policy.critic(buffer.final_obs).squeeze(-1)
    torch.testing.assert_close(buffer.log_probs.reshape(-1), log_prob, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(buffer.values.reshape(-1), value, rtol=1e-4, atol=1e-5)
    # reward 1 per step, plus gamma * V(final obs) where only the time limit ended the episode.
    cut = buffer.truncated & ~buffer.terminated
    expected = 1.0 + torch.where(cut, gamma * final_values, 0.0)
    torch.testing.assert_close(buffer.rewards, expected, rtol=1e-4, atol=1e-5)
    # The rollout hands on the observations after its last step (where that step ended no episode).
    assert torch.equal(next_obs[not_done[-1]], buffer.final_obs[-1][not_done[-1]])
