"""Rollout collection and scoring: what the update receives from the env loop."""

import torch

from envs.base import VecEnv
from envs.cartpole import CartPoleVecEnv
from trainer.algos.rollout import RolloutBuffer, collect_rollout, score_rollout
from trainer.nets.build import build_policy
from trainer.nets.normalization import RewardScaler
from trainer.nets.spec import make_policy_spec


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


class _TwoCartPoles(VecEnv):
    """Two CartPole batches as one env. grouped: they step as two groups, each `send` handing its
    half over and each `recv` returning it, as the async worker pool's halves do."""

    def __init__(self, num_envs: int, grouped: bool):
        super().__init__(num_envs, seed=0)
        self.parts = [CartPoleVecEnv(num_envs // 2, seed=seed, max_episode_steps=15) for seed in (1, 2)]
        self.single_observation_space = self.parts[0].single_observation_space
        self.single_action_space = self.parts[0].single_action_space
        self.grouped = grouped
        self._results = [None, None]

    def reset(self, seed=None):
        return torch.cat([part.reset(seed=None if seed is None else seed + i) for i, part in enumerate(self.parts)])

    def step(self, actions):
        halves = [part.step(half) for part, half in zip(self.parts, actions.chunk(2))]
        (obs, reward, terminated, truncated, info), (obs2, reward2, terminated2, truncated2, info2) = halves
        return (
            torch.cat((obs, obs2)),
            torch.cat((reward, reward2)),
            torch.cat((terminated, terminated2)),
            torch.cat((truncated, truncated2)),
            {"final_obs": torch.cat((info["final_obs"], info2["final_obs"]))},
        )

    @property
    def step_groups(self):
        half = self.num_envs // 2
        return (slice(0, half), slice(half, self.num_envs)) if self.grouped else super().step_groups

    def send(self, group, actions):
        if not self.grouped:
            return super().send(group, actions)
        self._results[group] = self.parts[group].step(actions)

    def recv(self, group):
        if not self.grouped:
            return super().recv(group)
        results, self._results[group] = self._results[group], None
        return results


def test_one_rollout_loop_gives_the_same_steps_whether_the_env_steps_in_one_group_or_in_two():
    """The rollout steps every env through `step_groups` / `send` / `recv_views` (envs/base.py):
    a whole batch at once (every native game) or two halves in turn (the async worker pool) fill
    the buffer alike, observation normalisation and reward scaling included."""
    num_envs, num_steps = 6, 40
    buffers, next_obs = {}, {}
    for grouped in (False, True):
        env = _TwoCartPoles(num_envs, grouped)
        torch.manual_seed(0)
        spec = make_policy_spec("ppo-small", env.single_observation_space, env.single_action_space, norm_obs=True)
        policy = build_policy(spec)
        scaler = RewardScaler(num_envs, 0.99, torch.device("cpu"))
        buffer = RolloutBuffer.allocate(num_steps, num_envs, (4,), policy, torch.device("cpu"))
        generator = torch.Generator().manual_seed(0)
        obs = env.reset(seed=3)
        for _ in range(2):  # the second rollout starts where the first ended
            obs = collect_rollout(env, policy, buffer, obs, generator, scaler)
        buffers[grouped], next_obs[grouped] = buffer, obs
    assert buffers[False].truncated.any() and buffers[False].terminated.any()
    for field in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs"):
        assert torch.equal(getattr(buffers[False], field), getattr(buffers[True], field)), field
    assert torch.equal(next_obs[False], next_obs[True])
