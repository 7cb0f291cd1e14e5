"""The algorithm's pieces against plain reference implementations: GAE, Adam, sampling,
log-probabilities, the networks' heads, normalisation."""
import math

import gymnasium
import numpy as np
import pytest
import torch

from trainer.models import FoldedMLP, build_policy, make_policy_spec
from trainer.normalization import RunningMeanStd
from trainer.ppo import Adam, compute_gae


def reference_gae(rewards, values, dones, last_value, gamma, lam):
    steps, envs = rewards.shape
    advantages = np.zeros((steps, envs))
    for env in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            next_value = last_value[env] if t == steps - 1 else values[t + 1, env]
            not_done = 1.0 - dones[t, env]
            delta = rewards[t, env] + gamma * next_value * not_done - values[t, env]
            running = delta + gamma * lam * not_done * running
            advantages[t, env] = running
    return advantages


def test_gae_matches_the_textbook_loop():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(7, 3, generator=generator)
    values = torch.randn(7, 3, generator=generator)
    dones = (torch.rand(7, 3, generator=generator) < 0.3).float()
    last_value = torch.randn(3, generator=generator)
    advantages, returns = compute_gae(rewards, values, dones, last_value, 0.97, 0.9)
    expected = reference_gae(rewards.numpy(), values.numpy(), dones.numpy(), last_value.numpy(), 0.97, 0.9)
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(returns.numpy(), expected + values.numpy(), rtol=1e-5, atol=1e-5)


def test_flat_adam_matches_torch_adam_and_clips_the_global_norm():
    torch.manual_seed(0)
    ours_net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    torch_net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    torch_net.load_state_dict(ours_net.state_dict())
    ours = Adam(ours_net, eps=1e-5)
    reference = torch.optim.Adam(torch_net.parameters(), lr=1e-2, eps=1e-5)
    for _ in range(5):
        x = torch.randn(16, 4)
        ours.zero_grad()
        ours_net(x).square().sum().backward()
        norm = ours.clip_grad_norm(0.5)
        ours.step(1e-2)
        reference.zero_grad()
        torch_net(x).square().sum().backward()
        reference_norm = torch.nn.utils.clip_grad_norm_(torch_net.parameters(), 0.5)
        reference.step()
        assert norm.item() == pytest.approx(reference_norm.item(), rel=1e-5)
    for ours_param, torch_param in zip(ours_net.parameters(), torch_net.parameters()):
        torch.testing.assert_close(ours_param, torch_param, rtol=1e-5, atol=1e-6)
    # Saving and loading the module keeps the parameters inside the flat vector.
    ours_net.load_state_dict(torch_net.state_dict())
    assert ours_net[0].weight.data_ptr() == ours.flat_param.data_ptr()


def discrete_policy(n=3):
    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (5,)), gymnasium.spaces.Discrete(n))
    torch.manual_seed(1)
    return build_policy(spec)


def test_categorical_sampling_follows_the_policy_probabilities():
    policy = discrete_policy()
    with torch.no_grad():
        policy.actor[-1].weight.mul_(300)  # make the distribution clearly non-uniform
    obs = torch.randn(1, 5).expand(60_000, 5)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        actions, log_probs, _ = policy.act(obs, generator)
        probabilities = policy.actor(obs[:1]).softmax(-1)[0]
    frequencies = torch.bincount(actions, minlength=3).float() / len(actions)
    torch.testing.assert_close(frequencies, probabilities, atol=0.01, rtol=0)
    torch.testing.assert_close(log_probs, probabilities.log()[actions])
    new_log_prob, entropy, _ = policy.evaluate(obs[:10], actions[:10])
    torch.testing.assert_close(new_log_prob, log_probs[:10])
    expected_entropy = torch.distributions.Categorical(probs=probabilities).entropy()
    torch.testing.assert_close(entropy, expected_entropy.expand(10))


@pytest.mark.parametrize("model_type", ["ppo-small", "ppo-medium", "ppo-large"])
def test_the_rollout_actor_and_scoring_compute_the_same_function_as_the_networks(model_type, test_device):
    spec = make_policy_spec(model_type, gymnasium.spaces.Box(-1, 1, (7,)), gymnasium.spaces.Discrete(3))
    torch.manual_seed(0)
    policy = build_policy(spec).to(test_device)
    with torch.no_grad():
        for parameter in policy.parameters():  # trained-looking weights, not the init
            parameter.add_(0.3 * torch.randn_like(parameter))
        obs = 3 * torch.randn(500, 7, device=test_device)
        logits, values = policy.actor(obs), policy.critic(obs).squeeze(-1)
    torch.testing.assert_close(FoldedMLP(policy.actor)(obs), logits, rtol=1e-4, atol=1e-4)
    actions = torch.randint(0, 3, (500,), device=test_device)
    log_probs, scored_values = policy.score(obs, actions)
    expected_log_probs = logits.log_softmax(-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_probs, expected_log_probs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scored_values, values, rtol=1e-4, atol=1e-4)


def test_the_rollout_sampler_follows_the_policy_probabilities():
    policy = discrete_policy()
    with torch.no_grad():
        policy.actor[-1].weight.mul_(300)
        obs = torch.randn(1, 5).expand(60_000, 5)
        probabilities = policy.actor(obs[:1]).softmax(-1)[0]
    sampler = policy.sampler()
    actions = sampler(obs, sampler.noise(1, len(obs), torch.Generator().manual_seed(0))[0])
    frequencies = torch.bincount(actions, minlength=3).float() / len(actions)
    torch.testing.assert_close(frequencies, probabilities, atol=0.01, rtol=0)
    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (3,)), gymnasium.spaces.Box(-1, 1, (2,)))
    gaussian = build_policy(spec)
    with torch.no_grad():
        gaussian.log_std.copy_(torch.tensor([0.3, -0.5]))
        obs = torch.randn(1, 3).expand(50_000, 3)
        mean = gaussian.actor(obs[:1])[0]
    sampler = gaussian.sampler()
    actions = sampler(obs, sampler.noise(1, len(obs), torch.Generator().manual_seed(0))[0])
    torch.testing.assert_close(actions.mean(0), mean, atol=0.02, rtol=0)
    torch.testing.assert_close(actions.std(0), torch.tensor([0.3, -0.5]).exp(), atol=0.02, rtol=0)


def test_gaussian_head_log_prob_entropy_and_clipping():
    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (3,)),
                            gymnasium.spaces.Box(low=np.array([-2.0, 0.0], dtype=np.float32), high=np.array([2.0, 1.0], dtype=np.float32)))
    policy = build_policy(spec)
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([0.3, -0.5]))
        obs = torch.randn(64, 3)
        actions, log_probs, _ = policy.act(obs, torch.Generator().manual_seed(0))
        mean = policy.actor(obs)
    normal = torch.distributions.Normal(mean, policy.log_std.exp())
    torch.testing.assert_close(log_probs, normal.log_prob(actions).sum(-1))
    _, entropy, _ = policy.evaluate(obs, actions)
    torch.testing.assert_close(entropy, normal.entropy().sum(-1))
    clipped = policy.env_action(torch.tensor([[5.0, -5.0]]))
    assert clipped.tolist() == [[2.0, 0.0]]


def test_cnn_policy_for_grid_and_image_observations():
    for shape in [(3, 12, 12), (84, 84, 3), (12, 12), (2, 84, 84)]:
        space = gymnasium.spaces.Box(0, 1, shape)
        policy = build_policy(make_policy_spec("ppo-cnn", space, gymnasium.spaces.Discrete(4)))
        actions, log_probs, values = policy.act(torch.rand(5, *shape))
        assert actions.shape == (5,) and values.shape == (5,)
    from trainer.models import ModelError

    with pytest.raises(ModelError, match="ppo-small"):
        make_policy_spec("ppo-cnn", gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2))


def test_orthogonal_init_gives_a_near_uniform_first_policy():
    policy = discrete_policy(4)
    with torch.no_grad():
        _, log_probs, _ = policy.act(torch.randn(256, 5))
    assert torch.allclose(log_probs, torch.full_like(log_probs, math.log(1 / 4)), atol=0.05)


def test_running_mean_std_merges_batches_exactly():
    data = torch.randn(1000, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1], dtype=torch.float64) + 3
    stats = RunningMeanStd((3,))
    for chunk in data.split(128):
        stats.accumulate(chunk)
        stats.commit()
    torch.testing.assert_close(stats.mean, data.mean(0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stats.var, data.var(0, unbiased=False), rtol=1e-4, atol=1e-6)
    normalized = stats.normalize(data.float())
    assert normalized.mean(0).abs().max() < 1e-3 and (normalized.std(0) - 1).abs().max() < 1e-2


@pytest.mark.parametrize("model_type, action_space, unclipped, weighted", [
    ("ppo-small", gymnasium.spaces.Discrete(3), False, False),
    ("ppo-large", gymnasium.spaces.Discrete(4), False, True),
    ("ppo-small", gymnasium.spaces.Discrete(2), True, False),
    ("ppo-medium", gymnasium.spaces.Box(-1, 1, (2,)), False, True),
])
def test_the_written_out_gradient_equals_autograd(model_type, action_space, unclipped, weighted, test_device):
    from trainer import mlp_grad
    from trainer.ppo import UpdateBatch, UpdateSettings, autograd_loss

    spec = make_policy_spec(model_type, gymnasium.spaces.Box(-1, 1, (6,)), action_space)
    torch.manual_seed(0)
    policy = build_policy(spec).to(test_device)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    size = 96

    def randn(*shape):
        return torch.randn(*shape, device=test_device)

    obs = randn(size, 6)
    with torch.no_grad():
        sampler = policy.sampler()
        generator = torch.Generator(device=test_device).manual_seed(1)
        actions = sampler(obs, sampler.noise(1, size, generator, test_device)[0])
        old_log_probs = policy.score(obs, actions)[0] + 0.3 * randn(size)  # ratios in and out of the clip range
    batch = UpdateBatch(obs=obs, actions=actions, log_probs=old_log_probs, advantages=randn(size),
                        returns=randn(size), values=randn(size))
    weights = torch.rand(size, device=test_device) if weighted else None
    settings = UpdateSettings(update_epochs=1, mini_batch_size=size, clip_coef=0.2, clip_vloss=False, norm_adv=True,
                              ent_coef=0.05, vf_coef=0.5, max_grad_norm=0.5, target_kl=None, unclipped=unclipped,
                              use_per=False, per_alpha=0.6, per_beta=0.4)
    assert mlp_grad.supports(policy, settings.clip_vloss)
    parameters = list(policy.parameters())
    for parameter in parameters:
        parameter.grad = None
    loss, expected_losses, expected_log_ratio = autograd_loss(policy, batch, batch.advantages, weights, settings)
    loss.backward()
    expected_grads = [parameter.grad.clone() for parameter in parameters]
    clipped = ((expected_log_ratio.exp() - 1).abs() > 0.2).float().mean()
    assert 0.1 < clipped < 0.9  # both branches of the clipped objective are exercised
    for parameter in parameters:
        parameter.grad.fill_(float("nan"))  # every gradient must be written, not accumulated
    losses, log_ratio = mlp_grad.ppo_loss_and_gradient(
        policy, obs, actions, old_log_probs, batch.advantages, batch.returns, weights,
        settings.clip_coef, settings.ent_coef, settings.vf_coef, unclipped)
    torch.testing.assert_close(losses, expected_losses, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(log_ratio, expected_log_ratio, rtol=1e-4, atol=1e-5)
    for parameter, expected in zip(parameters, expected_grads):
        torch.testing.assert_close(parameter.grad, expected, rtol=1e-3, atol=1e-6)
