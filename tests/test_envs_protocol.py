"""The batched methods every VecEnv has (envs/base.py): `step_groups`, `send`, `recv`,
`recv_views`, `step_views`, with defaults that step the whole batch at once."""

import pytest
import torch

from envs import EnvError, make_vec_env


@pytest.mark.parametrize("name", ["cartpole", "flappy_bird", "snake"])
def test_send_then_recv_is_one_step_of_the_whole_batch(name):
    stepped, sent = make_vec_env(name, 5, seed=2), make_vec_env(name, 5, seed=2)
    assert sent.step_groups == (slice(0, 5),)
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        actions = torch.randint(0, stepped.single_action_space.n, (5,), generator=generator)
        expected = stepped.step(actions)
        sent.send(0, actions)
        received = sent.recv_views(0) if torch.rand(1, generator=generator) < 0.5 else sent.recv(0)
        for want, got in zip(expected[:4], received[:4]):
            assert torch.equal(want, got)
        assert torch.equal(expected[4]["final_obs"], received[4]["final_obs"])
    views = sent.step_views(actions)
    assert torch.equal(views[0], stepped.step(actions)[0])
    assert stepped.stats.drain() == sent.stats.drain()


def test_send_and_recv_out_of_turn_say_so():
    env = make_vec_env("cartpole", 3, seed=0)
    actions = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(EnvError, match="without send"):
        env.recv(0)
    with pytest.raises(EnvError, match="one group"):
        env.send(1, actions)
    env.send(0, actions)
    with pytest.raises(EnvError, match="twice"):
        env.send(0, actions)
    env.reset()  # forgets a step nobody received
    env.send(0, actions)
    env.recv(0)
