"""EpisodeStats: running totals on the device, finished episodes summarised by drain()."""
import pytest
import torch

from envs import EpisodeStats

torch.set_num_threads(1)


def _step(stats, rewards, scores, dones):
    stats.update(torch.tensor(rewards, dtype=torch.float32), torch.tensor(scores, dtype=torch.float32), torch.tensor(dones))


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


def test_reset_forgets_running_episodes():
    stats = EpisodeStats(num_envs=2, device="cpu")
    _step(stats, [5.0, 5.0], [0, 0], [False, False])
    stats.reset()
    _step(stats, [1.0, 1.0], [0, 0], [True, True])
    assert stats.drain().return_mean == pytest.approx(1.0)


def test_update_never_syncs_with_the_host(test_device):
    """On CUDA, any host sync inside update() raises (sync debug mode); CPU runs the same code."""
    if not test_device.startswith("cuda"):
        pytest.skip("host syncs can only be detected on a CUDA device")
    stats = EpisodeStats(num_envs=64, device=test_device)
    reward = torch.ones(64, device=test_device)
    done = torch.rand(64, device=test_device) < 0.3
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            stats.update(reward, reward, done)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert stats.drain().count == int(done.sum()) * 10
