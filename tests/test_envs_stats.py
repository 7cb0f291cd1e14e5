"""EpisodeStats: running totals on the device, finished episodes summarised by drain()."""

import random

import pytest
import torch

from envs import EpisodeStats, EpisodeSummary
from envs.stats import RECENT_EPISODES

torch.set_num_threads(1)


def _step(stats, rewards, scores, dones):
    stats.update(
        torch.tensor(rewards, dtype=torch.float32), torch.tensor(scores, dtype=torch.float32), torch.tensor(dones)
    )


def test_scripted_episodes_give_the_right_counts_means_and_maxima():
    stats = EpisodeStats(num_envs=3, device="cpu")
    assert stats.drain().count == 0 and stats.drain().return_mean is None
    # env 0: returns 1 + 2 = 3 over 2 steps, score 5; env 1: return 10 in 1 step, score 1;
    # env 2: still running (return 0.5 so far) and must not be counted.
    _step(stats, [1.0, 10.0, 0.5], [0, 1, 0], [False, True, False])
    _step(stats, [2.0, -4.0, 0.0], [5, 0, 0], [True, False, False])
    summary = stats.drain()
    assert summary.count == 2
    assert summary.return_mean == pytest.approx((3 + 10) / 2)
    assert summary.length_mean == pytest.approx((2 + 1) / 2)
    assert summary.score_mean == pytest.approx((5 + 1) / 2)
    assert summary.return_max == 10 and summary.score_max == 5
    assert summary.recent_return_mean == pytest.approx(6.5)
    # The running episodes carried on: env 1 restarted at -4, env 2 is at 0.5 over 2 steps.
    assert stats.running_return.tolist() == [0.0, -4.0, 0.5]
    assert stats.running_length.tolist() == [0.0, 1.0, 2.0]
    # drain() restarts the since-last-drain totals but keeps the recent window.
    _step(stats, [1.0, 1.0, 1.0], [0, 2, 3], [False, True, True])
    summary = stats.drain()
    assert summary.count == 2
    assert summary.return_mean == pytest.approx((-3 + 1.5) / 2)
    assert summary.length_mean == pytest.approx((2 + 3) / 2)
    assert summary.score_max == 3
    assert summary.recent_return_mean == pytest.approx((3 + 10 - 3 + 1.5) / 4)
    assert summary.recent_score_mean == pytest.approx((5 + 1 + 2 + 3) / 4)


def test_recent_window_keeps_the_last_100_episodes():
    stats = EpisodeStats(num_envs=1, device="cpu")
    for episode in range(250):  # one-step episodes with return = episode number
        _step(stats, [float(episode)], [float(episode)], [True])
    summary = stats.drain()
    assert summary.count == 250
    assert summary.recent_return_mean == pytest.approx(sum(range(150, 250)) / 100)
    assert summary.return_mean == pytest.approx(sum(range(250)) / 250)
    assert summary.return_max == 249


def test_more_than_100_envs_finishing_in_one_step_fill_the_window_without_collisions():
    stats = EpisodeStats(num_envs=300, device="cpu")
    _step(stats, [3.0] * 300, [1.0] * 300, [True] * 300)
    _step(stats, [1.0] * 300, [0.0] * 300, [False] * 300)
    summary = stats.drain()
    assert summary.count == 300
    assert summary.recent_return_mean == pytest.approx(3.0)
    assert summary.recent_length_mean == pytest.approx(1.0)


def test_maxima_count_only_finished_episodes_even_when_all_are_negative():
    stats = EpisodeStats(num_envs=3, device="cpu")
    _step(stats, [-2.0, 0.0, 5.0], [-1.0, 0.0, 9.0], [True, False, False])
    _step(stats, [-0.5, 0.0, 5.0], [-3.0, 0.0, 9.0], [True, False, False])
    summary = stats.drain()
    assert (summary.return_max, summary.score_max) == (-0.5, -1.0)


def test_reset_forgets_running_episodes():
    stats = EpisodeStats(num_envs=2, device="cpu")
    _step(stats, [5.0, 5.0], [0, 0], [False, False])
    stats.reset()
    _step(stats, [1.0, 1.0], [0, 0], [True, True])
    assert stats.drain().return_mean == pytest.approx(1.0)


def test_update_never_syncs_with_the_host(test_device):
    """On CUDA, any host sync inside update() raises (sync debug mode); CPU runs the same code.
    Enough steps that update() also folds its step log into the totals, twice."""
    if not test_device.startswith("cuda"):
        pytest.skip("host syncs can only be detected on a CUDA device")
    stats = EpisodeStats(num_envs=64, device=test_device)
    reward = torch.ones(64, device=test_device)
    done = torch.rand(64, device=test_device) < 0.3
    steps = 2 * stats._log.capacity + 3
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            stats.update(reward, reward, done)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert stats.drain().count == int(done.sum()) * steps


class ReferenceStats:
    """EpisodeStats written the plain way, one env and one episode at a time, in Python."""

    def __init__(self, num_envs: int):
        self.running = [[0.0, 0, 0.0] for _ in range(num_envs)]  # return, length, score
        self.finished: list[tuple[float, int, float]] = []  # since the last drain
        self.recent: list[tuple[float, int, float]] = []  # the last RECENT_EPISODES ever
        self.last_step: list[tuple[float, int, float]] = []  # per env, the episode it ended (or 0s)

    def update(self, rewards, scores, dones):
        self.last_step = [(0.0, 0, 0.0)] * len(self.running)
        for env, (reward, score, done) in enumerate(zip(rewards, scores, dones)):
            episode = self.running[env]
            episode[0] += reward
            episode[1] += 1
            episode[2] = score
            if done:
                self.last_step[env] = tuple(episode)
                self.finished.append(tuple(episode))
                self.recent = (self.recent + [tuple(episode)])[-RECENT_EPISODES:]
                self.running[env] = [0.0, 0, 0.0]

    def drain(self) -> EpisodeSummary:
        finished, self.finished = self.finished, []
        returns, lengths, scores = zip(*finished) if finished else ((), (), ())
        recent_returns, recent_lengths, recent_scores = zip(*self.recent) if self.recent else ((), (), ())

        def mean(values):
            return sum(values) / len(values) if values else None

        return EpisodeSummary(
            count=len(finished),
            return_mean=mean(returns),
            length_mean=mean(lengths),
            score_mean=mean(scores),
            return_max=max(returns, default=None),
            score_max=max(scores, default=None),
            recent_return_mean=mean(recent_returns),
            recent_score_mean=mean(recent_scores),
            recent_length_mean=mean(recent_lengths),
        )


@pytest.mark.parametrize(
    "num_envs, done_chance, steps",
    [
        (1, 0.3, 400),
        (7, 0.2, 300),  # several step logs between drains, drains in the middle of one
        (64, 0.6, 120),  # hundreds of episodes end within one step log
    ],
)
def test_summaries_equal_a_plain_python_reference(num_envs, done_chance, steps):
    """Random rewards (halves, some negative, so every sum is exact), scores and episode ends;
    drains at irregular steps, twice in a row once. Every summary must equal the reference's, and
    after every step `finished` the values of the episodes that ended on it."""
    rng = random.Random(num_envs)
    stats, reference = EpisodeStats(num_envs, "cpu"), ReferenceStats(num_envs)
    drain_after = {0, 4, 40, 41, 77, 150, steps - 1}
    summaries = []
    for step in range(steps):
        rewards = [rng.randint(-6, 6) / 2 for _ in range(num_envs)]
        scores = [float(rng.randint(0, 9)) for _ in range(num_envs)]
        dones = [rng.random() < done_chance for _ in range(num_envs)]
        _step(stats, rewards, scores, dones)
        reference.update(rewards, scores, dones)
        # What evaluation reads: the episodes that ended on this step, also across log folds.
        assert stats.finished.t().tolist() == [list(episode) for episode in reference.last_step], f"step {step}"
        if step in drain_after:
            summaries.append(stats.drain())
            assert summaries[-1] == reference.drain(), f"after step {step}"
            assert stats.finished.t().tolist() == [list(episode) for episode in reference.last_step]
    assert stats.drain() == reference.drain()  # nothing since the last drain
    assert sum(summary.count for summary in summaries) > RECENT_EPISODES


def test_a_checkpoint_taken_between_two_folds_of_the_step_log_resumes_the_same_statistics():
    """capture_env_state must include the steps still in EpisodeStats' step log: a fresh env
    restored from it then reports exactly what the original env reports."""
    from envs.cartpole import CartPoleVecEnv
    from trainer.run.checkpoint import capture_env_state, restore_env_state

    original = CartPoleVecEnv(16, seed=0)
    actions = torch.Generator().manual_seed(0)
    original.stats.drain()
    for _ in range(original.stats._log.capacity + 13):  # one fold, then 13 steps in the log
        original.step(torch.randint(0, 2, (16,), generator=actions))
    snapshot = capture_env_state(original)
    restored = CartPoleVecEnv(16, seed=1)
    restore_env_state(restored, snapshot)
    for _ in range(50):
        batch = torch.randint(0, 2, (16,), generator=actions)
        original.step(batch)
        restored.step(batch)
    original_summary, restored_summary = original.stats.drain(), restored.stats.drain()
    assert original_summary.count > 16
    assert restored_summary == original_summary
