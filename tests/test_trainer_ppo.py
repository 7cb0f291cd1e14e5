"""The algorithm's pieces against plain reference implementations: GAE, Adam, sampling,
log-probabilities, the networks' heads, normalisation."""

import math

import gymnasium
import numpy as np
import pytest
import torch

from trainer.algos.ppo import Adam, compute_gae
from trainer.nets.build import build_policy
from trainer.nets.fast_forward import FoldedMLP
from trainer.nets.normalization import RunningMeanStd
from trainer.nets.spec import make_policy_spec


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


def test_gae_on_a_three_step_rollout_worked_by_hand():
    """gamma = lambda = 0.5; env 0's episode ends with step 1, env 1's runs on.
    env 0: delta = (1 + .5*1 - .5, 2 - 1, 3 + .5*2 - 1.5) = (1, 1, 2.5), the done cuts the chain at
           step 1: A = (1 + .25*1, 1, 2.5) = (1.25, 1, 2.5).
    env 1: delta = (1 + .5*1 - .5, 2 + .5*1.5 - 1, 2.5) = (1, 1.75, 2.5):
           A_2 = 2.5, A_1 = 1.75 + .25*2.5 = 2.375, A_0 = 1 + .25*2.375 = 1.59375.
    returns = A + V."""
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    values = torch.tensor([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5]])
    dones = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    advantages, returns = compute_gae(rewards, values, dones, torch.tensor([2.0, 2.0]), 0.5, 0.5)
    assert advantages.tolist() == [[1.25, 1.59375], [1.0, 2.375], [2.5, 2.5]]
    assert returns.tolist() == [[1.75, 2.09375], [2.0, 3.375], [4.0, 4.0]]


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


def test_the_folded_mlp_follows_the_activation_table():
    # ReLU folds with scale 1 and shift 0, tanh with 2 and -1: both must give the module's output.
    torch.manual_seed(0)
    for activation in (torch.nn.ReLU(), torch.nn.Tanh()):
        mlp = torch.nn.Sequential(
            torch.nn.Linear(7, 16), activation, torch.nn.Linear(16, 8), activation, torch.nn.Linear(8, 3)
        )
        obs = 3 * torch.randn(200, 7)
        with torch.no_grad():
            torch.testing.assert_close(FoldedMLP(mlp)(obs), mlp(obs), rtol=1e-4, atol=1e-5)
    from trainer.nets.activations import UnsupportedNetwork

    with pytest.raises(UnsupportedNetwork, match=r"layer 1 \(Sigmoid\(\)\).*Tanh, ReLU"):
        FoldedMLP(torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.Sigmoid(), torch.nn.Linear(16, 3)))


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
    spec = make_policy_spec(
        "ppo-small",
        gymnasium.spaces.Box(-1, 1, (3,)),
        gymnasium.spaces.Box(low=np.array([-2.0, 0.0], dtype=np.float32), high=np.array([2.0, 1.0], dtype=np.float32)),
    )
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
    """Every layout is read as the (C, H, W) network it is: a policy for (H, W, C) images or (H, W)
    grids, given the weights of the (C, H, W) one, gives exactly its outputs on the same pixels
    (a reshape instead of a transpose keeps the shapes but not the values). Sampled actions'
    log-probabilities are the softmax's, and pixels in 0..255 are scaled to 0..1."""
    torch.manual_seed(0)
    discrete = gymnasium.spaces.Discrete(4)

    def cnn(shape, high=1.0, dtype=np.float32):
        return build_policy(make_policy_spec("ppo-cnn", gymnasium.spaces.Box(0, high, shape, dtype), discrete))

    policies = {}
    for chw, shape, to_chw in [
        ((3, 84, 84), (84, 84, 3), lambda x: x.permute(0, 3, 1, 2)),
        ((1, 12, 12), (12, 12), lambda x: x.unsqueeze(1)),
        ((2, 84, 84), (2, 84, 84), lambda x: x),
        ((3, 12, 12), (3, 12, 12), lambda x: x),
    ]:
        reference = trained_looking(cnn(chw), scale=0.05)
        policy = policies[shape] = reference if shape == chw else cnn(shape)
        policy.load_state_dict(reference.state_dict())
        obs = torch.rand(5, *shape)
        with torch.no_grad():
            actions, log_probs, values = policy.act(obs, torch.Generator().manual_seed(1))
            torch.testing.assert_close(values, reference.value(to_chw(obs)))
            logits = reference.actor(reference.torso(to_chw(obs)))
        torch.testing.assert_close(log_probs, logits.log_softmax(-1).gather(1, actions.unsqueeze(1)).squeeze(1))
        assert logits.std(0).max() > 1e-3, f"{shape}: the observations must matter"
    pixels, unit = cnn((84, 84, 3), high=255, dtype=np.uint8), policies[(84, 84, 3)]
    pixels.load_state_dict(unit.state_dict())
    obs = torch.randint(0, 256, (5, 84, 84, 3)).float()
    with torch.no_grad():
        torch.testing.assert_close(pixels.value(obs), unit.value(obs / 255))
    from trainer.nets.spec import ModelError

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


def trained_looking(policy, scale=0.2):
    """Perturb the init so that no layer is near its special initial values."""
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return policy


def minibatch_of(policy, size, device="cpu", obs_size=6):
    """A minibatch whose ratios fall both inside and outside the clip range."""
    from trainer.algos.ppo import UpdateBatch

    def randn(*shape):
        return torch.randn(*shape, device=device)

    obs = randn(size, obs_size)
    with torch.no_grad():
        sampler = policy.sampler()
        generator = torch.Generator(device=device).manual_seed(1)
        actions = sampler(obs, sampler.noise(1, size, generator, device)[0])
        old_log_probs = policy.score(obs, actions)[0] + 0.3 * randn(size)
    return UpdateBatch(
        obs=obs,
        actions=actions,
        log_probs=old_log_probs,
        advantages=randn(size),
        returns=randn(size),
        values=randn(size),
    )


def settings_for(**changes):
    from trainer.algos.ppo import UpdateSettings

    values = dict(
        update_epochs=1,
        mini_batch_size=96,
        clip_coef=0.2,
        clip_vloss=False,
        norm_adv=True,
        ent_coef=0.05,
        vf_coef=0.5,
        max_grad_norm=0.5,
        target_kl=None,
        unclipped=False,
        use_per=False,
        per_alpha=0.6,
        per_beta=0.4,
    )
    return UpdateSettings(**{**values, **changes})


def relu_policy(spec):
    """An ActorCritic whose MLPs use ReLU: the written-out forms follow the activation table."""
    policy = build_policy(spec)
    for mlp in (policy.actor, policy.critic):
        for index, module in enumerate(mlp):
            if isinstance(module, torch.nn.Tanh):
                mlp[index] = torch.nn.ReLU()
    return policy


@pytest.mark.parametrize(
    "model_type, action_space, unclipped, weighted, activation",
    [
        ("ppo-small", gymnasium.spaces.Discrete(3), False, False, "tanh"),
        ("ppo-large", gymnasium.spaces.Discrete(4), False, True, "tanh"),
        ("ppo-small", gymnasium.spaces.Discrete(2), True, False, "tanh"),
        ("ppo-medium", gymnasium.spaces.Box(-1, 1, (2,)), False, True, "tanh"),
        ("ppo-small", gymnasium.spaces.Box(-1, 1, (2,)), False, False, "relu"),
    ],
)
def test_the_written_out_gradient_equals_autograd_of_the_reference_loss(
    model_type, action_space, unclipped, weighted, activation, test_device
):
    from trainer.algos import ppo_fast as mlp_grad
    from trainer.algos.ppo_gradient import ppo_loss

    spec = make_policy_spec(model_type, gymnasium.spaces.Box(-1, 1, (6,)), action_space)
    torch.manual_seed(0)
    policy = (relu_policy(spec) if activation == "relu" else build_policy(spec)).to(test_device)
    trained_looking(policy)
    size = 96
    batch = minibatch_of(policy, size, test_device)
    weights = torch.rand(size, device=test_device) if weighted else None
    settings = settings_for(unclipped=unclipped)
    structure = mlp_grad.structure_of(policy)
    assert structure is not None
    parameters = list(policy.parameters())
    for parameter in parameters:
        parameter.grad = None
    loss, expected_losses, expected_log_ratio = ppo_loss(policy, batch, batch.advantages, weights, settings)
    loss.backward()
    expected_grads = [parameter.grad.clone() for parameter in parameters]
    clipped = ((expected_log_ratio.exp() - 1).abs() > 0.2).float().mean()
    assert 0.1 < clipped < 0.9  # both branches of the clipped objective are exercised
    for parameter in parameters:
        parameter.grad.fill_(float("nan"))  # every gradient must be written, not accumulated
    losses, log_ratio = mlp_grad.ppo_loss_and_gradient(structure, batch, batch.advantages, weights, settings)
    torch.testing.assert_close(losses, expected_losses, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(log_ratio, expected_log_ratio, rtol=1e-4, atol=1e-5)
    for parameter, expected in zip(parameters, expected_grads):
        torch.testing.assert_close(parameter.grad, expected, rtol=1e-3, atol=1e-6)


def test_the_reference_loss_is_the_clipped_surrogate_value_loss_and_entropy_bonus():
    # One sample per case, worked out by hand: the ratio, the clip, the value loss, the entropy.
    from trainer.algos.ppo_gradient import ppo_loss

    policy = discrete_policy(2)
    batch = minibatch_of(policy, 4, obs_size=5)
    with torch.no_grad():
        new_log_prob, entropy, value = policy.evaluate(batch.obs, batch.actions)
    ratio = torch.tensor([0.5, 1.1, 1.5, 1.5])
    batch.log_probs = new_log_prob - ratio.log()
    advantages = torch.tensor([1.0, -2.0, 1.0, -1.0])
    # min(r A, clip(r, 0.8, 1.2) A), the pessimistic bound: 0.5 (not 0.8), -2.2, 1.2 (clipped, not 1.5), -1.5
    expected_policy_loss = -(0.5 - 2.2 + 1.2 - 1.5) / 4
    expected_value_loss = 0.5 * (value - batch.returns).square().mean()
    settings = settings_for(ent_coef=0.1, vf_coef=0.5)
    loss, (policy_loss, value_loss, entropy_mean), _ = ppo_loss(policy, batch, advantages, None, settings)
    assert policy_loss.item() == pytest.approx(expected_policy_loss, rel=1e-5)
    assert value_loss.item() == pytest.approx(expected_value_loss.item(), rel=1e-5)
    assert entropy_mean.item() == pytest.approx(entropy.mean().item(), rel=1e-5)
    expected_loss = expected_policy_loss - 0.1 * entropy.mean() + 0.5 * expected_value_loss
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-5)
    _, (a2c_policy_loss, _, _), _ = ppo_loss(policy, batch, advantages, None, settings_for(unclipped=True))
    assert a2c_policy_loss.item() == pytest.approx(-(0.5 - 2.2 + 1.5 - 1.5) / 4, rel=1e-5)


def test_the_written_out_gradient_only_for_networks_it_derives_from():
    from trainer.algos import ppo_fast as mlp_grad
    from trainer.algos.ppo_gradient import choose_gradient

    def chosen(policy, **changes) -> str:
        return choose_gradient(policy, settings_for(**changes)).func.__name__

    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (5,)), gymnasium.spaces.Discrete(3))
    assert chosen(build_policy(spec)) == "_written_out_gradient"
    assert chosen(build_policy(spec), clip_vloss=True) == "_autograd_gradient"  # it has no clipped value loss
    # An activation without an entry in the table: autograd, and the rollout uses the module.
    policy = build_policy(spec)
    policy.actor[1] = torch.nn.Sigmoid()
    assert mlp_grad.structure_of(policy) is None and chosen(policy) == "_autograd_gradient"
    assert policy.sampler().actor is None
    obs, actions = torch.randn(50, 5), torch.randint(0, 3, (50,))
    with torch.no_grad():
        torch.testing.assert_close(policy.score(obs, actions)[0], policy.evaluate(obs, actions)[0])
    # A parameter the written-out gradient would not know of.
    policy = build_policy(spec)
    policy.temperature = torch.nn.Parameter(torch.ones(()))
    assert mlp_grad.structure_of(policy) is None
    cnn = build_policy(
        make_policy_spec("ppo-cnn", gymnasium.spaces.Box(0, 1, (3, 12, 12)), gymnasium.spaces.Discrete(4))
    )
    assert mlp_grad.structure_of(cnn) is None


def test_an_update_with_an_activation_outside_the_table_trains_through_autograd():
    # nn.Sigmoid has no written-out form: the update must still move the weights as autograd says.
    from trainer.algos.ppo import Adam, ppo_update

    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (6,)), gymnasium.spaces.Discrete(3))
    torch.manual_seed(0)
    policy = build_policy(spec)
    policy.actor[1] = torch.nn.Sigmoid()
    trained_looking(policy)
    batch = minibatch_of(policy, 96)
    before = [p.detach().clone() for p in policy.parameters()]
    ppo_update(policy, Adam(policy), batch, settings_for(), 1e-3, torch.Generator().manual_seed(0))
    moved = [not torch.equal(b, p) for b, p in zip(before, policy.parameters())]
    assert all(moved)


def update_once(policy, optimizer):
    from trainer.algos.ppo import ppo_update

    batch = minibatch_of(policy, 96)
    return ppo_update(policy, optimizer, batch, settings_for(), 1e-3, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("action_space", [gymnasium.spaces.Discrete(3), gymnasium.spaces.Box(-1, 1, (2,))])
def test_module_zero_grad_is_refused_not_silently_ignored(action_space):
    # module.zero_grad() sets every .grad to None: the written-out gradient would write nowhere
    # (torch.mm(out=None)) and Adam would step on stale gradients.
    from trainer.algos.ppo import Adam, OptimizerError

    policy = trained_looking(
        build_policy(make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (6,)), action_space))
    )
    optimizer = Adam(policy)
    update_once(policy, optimizer)
    policy.zero_grad()
    with pytest.raises(OptimizerError, match=r"parameter '[\w.]+' has \.grad = None.*optimizer\.zero_grad\(\)"):
        update_once(policy, optimizer)


def test_moving_the_model_after_building_the_optimiser_is_refused(test_device):
    # .to() re-points every parameter at new storage: Adam would step a vector the model no longer reads.
    from trainer.algos.ppo import Adam, OptimizerError

    policy = trained_looking(
        build_policy(make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (6,)), gymnasium.spaces.Discrete(3)))
    )
    optimizer = Adam(policy)
    policy.to(torch.float64)
    with pytest.raises(OptimizerError, match=r"'actor\.0\.weight' was moved or replaced.*build Adam\(model\)"):
        optimizer.check_parameters()
    if test_device != "cpu":
        policy = build_policy(policy.spec)
        optimizer = Adam(policy)
        policy.to(test_device)
        with pytest.raises(OptimizerError, match="moved or replaced"):
            optimizer.check_parameters()


def test_update_settings_come_from_the_config_by_name():
    from dataclasses import fields

    from trainer.algos.ppo import UpdateSettings
    from trainer.config.defaults import load_config

    overrides = [
        "update_epochs=3",
        "num_envs=8",
        "num_steps=32",
        "mini_batch_size=64",
        "clip_coef=0.3",
        "clip_vloss=true",
        "norm_adv=false",
        "ent_coef=0.02",
        "vf_coef=0.7",
        "max_grad_norm=0.9",
        "target_kl=0.05",
        "use_per=true",
        "per_alpha=0.5",
        "per_beta=0.3",
    ]
    config = load_config(None, overrides)
    settings = UpdateSettings.from_config(config)
    for field in fields(UpdateSettings):
        if field.name != "unclipped":
            assert getattr(settings, field.name) == getattr(config, field.name), field.name
    assert settings.mini_batch_size == 64 and settings.clip_coef == 0.3 and settings.target_kl == 0.05
    assert settings.unclipped is False
    assert UpdateSettings.from_config(load_config(None, ["algo=a2c"])).unclipped is True
