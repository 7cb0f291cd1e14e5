"""The native envs on the test device (CPU by default; RL_STUDIO_TEST_DEVICE=cuda on a GPU)."""

import pytest
import torch

from envs import make_vec_env

torch.set_num_threads(1)
GAMES = ["cartpole", "flappy_bird", "snake"]


def _rollout(name, device, seed, steps=150, **kwargs):
    env = make_vec_env(name, 32, device=device, seed=seed, **kwargs)
    generator = torch.Generator(device=env.device).manual_seed(0)
    observations = [env.reset()]
    for _ in range(steps):
        actions = torch.randint(0, env.single_action_space.n, (32,), generator=generator, device=env.device)
        obs, reward, terminated, truncated, info = env.step(actions)
        assert obs.device == env.device and reward.device == env.device and terminated.dtype == torch.bool
        assert info["final_obs"].shape == obs.shape
        observations.append(obs)
    return torch.stack(observations).cpu(), env.stats.drain()


@pytest.mark.parametrize("name", GAMES)
def test_games_run_on_the_device_and_are_reproducible(name, test_device):
    first, summary = _rollout(name, test_device, seed=1)
    second, _ = _rollout(name, test_device, seed=1)
    assert torch.equal(first, second)
    assert summary.count > 0 and summary.length_mean > 0


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("cartpole", {}),
        ("flappy_bird", {}),
        ("flappy_bird", {"obs": "pixels"}),
        ("snake", {}),
        ("snake", {"obs": "grid"}),
    ],
)
def test_step_never_syncs_with_the_host(name, kwargs, test_device):
    """No .item()/.any()/boolean indexing in step: on CUDA any host sync raises here."""
    if not test_device.startswith("cuda"):
        pytest.skip("host syncs can only be detected on a CUDA device")
    env = make_vec_env(name, 64, device=test_device, seed=0, **kwargs)
    env.reset()
    actions = torch.randint(0, env.single_action_space.n, (100, 64), device=test_device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(100):
            env.step(actions[step])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert env.stats.drain().count > 0
