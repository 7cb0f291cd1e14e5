"""DQN's written-out gradient (trainer/algos/dqn_fast.py) against autograd on the reference loss
(tests/test_dqn.py holds the update's loss and targets to plain Python)."""

from __future__ import annotations

import torch

from trainer.algos.dqn_fast import q_layers, q_loss_and_gradient
from trainer.nets.q_network import QNetwork


def test_the_written_out_gradient_is_autograds_on_the_reference_loss():
    spec = {
        "model_type": "ppo-small",
        "hidden_sizes": [16, 16],
        "obs_shape": [4],
        "obs_scale": 1.0,
        "action": {"kind": "discrete", "n": 3},
        "network": "q",
    }
    torch.manual_seed(0)
    network = QNetwork(spec)
    generator = torch.Generator().manual_seed(2)
    obs, target = torch.randn(64, 4, generator=generator), torch.randn(64, generator=generator)
    actions = torch.randint(3, (64,), generator=generator)
    weights = torch.rand(64, generator=generator) + 0.1

    q = network(obs).gather(1, actions.unsqueeze(1)).squeeze(1)  # the reference: autograd
    reference_loss = (weights * (q - target).square()).mean()
    expected = torch.autograd.grad(reference_loss, list(network.parameters()))

    layers = q_layers(network)
    assert layers is not None and q_layers(QNetwork({**spec, "dueling": True})) is None  # dueling: autograd
    for parameter in network.parameters():
        parameter.grad = torch.full_like(parameter, 7.0)  # overwritten, not added to
    loss, q_taken, td_error = q_loss_and_gradient(layers, obs, actions, target, weights)
    torch.testing.assert_close(loss, reference_loss.detach())
    torch.testing.assert_close(q_taken, q.detach())
    torch.testing.assert_close(td_error, (q - target).detach())
    for parameter, gradient in zip(network.parameters(), expected, strict=True):
        torch.testing.assert_close(parameter.grad, gradient)
