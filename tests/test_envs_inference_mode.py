"""The trainer collects rollouts inside torch.inference_mode() (cheaper ops); every env must
keep working outside it afterwards: reset, statistics, checkpoint capture and restore, and
plain stepping. (An attribute that became an inference tensor inside the rollout and is then
updated in place outside would raise here.)"""

import pytest
import torch

from envs.registry import make_vec_env
from trainer.run.checkpoint import capture_env_state, restore_env_state

ENVS = [
    ("cartpole", {}),
    ("cartpole", {"precision": "float64"}),
    ("flappy_bird", {}),
    ("flappy_bird", {"obs": "pixels"}),
    ("snake", {}),
    ("snake", {"obs": "grid"}),
    ("gym:CartPole-v1", {}),
]


@pytest.mark.parametrize(
    "name, kwargs", ENVS, ids=[f"{n}-{'-'.join(map(str, k.values())) or 'default'}" for n, k in ENVS]
)
def test_an_env_stepped_in_inference_mode_works_outside_it(name, kwargs, test_device):
    device = "cpu" if name.startswith("gym:") else test_device
    env = make_vec_env(name, 6, device=device, seed=0, **kwargs)
    actions = torch.zeros(6, dtype=torch.int64, device=device)

    def rollout():
        with torch.inference_mode():
            for _ in range(80):  # long enough for episodes to end and the statistics' log to fold
                env.step(actions)

    env.reset(seed=0)
    rollout()
    summary = env.stats.drain()
    assert summary.count > 0
    state = capture_env_state(env)
    obs, reward, terminated, truncated, info = env.step(actions)  # straight after a rollout
    obs.add_(0)  # what a caller gets back is an ordinary tensor
    rollout()
    env.reset(seed=1)  # straight after a rollout
    for _ in range(40):
        env.step(actions)
    assert env.stats.drain().count > 0
    env.close()
    if state is not None:  # a resumed run: a fresh env takes the state captured after the rollout
        resumed = make_vec_env(name, 6, device=device, seed=5, **kwargs)
        restore_env_state(resumed, state)
        for _ in range(40):
            resumed.step(actions)
        assert resumed.stats.drain().count > 0
