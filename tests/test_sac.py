"""SAC (trainer/algos/sac.py, trainer/nets/sac_actor.py): the tanh-squashed log-probability and the
entropy (alpha) loss against torch.distributions and autograd; one update's critic loss against a
plain-Python soft target; the delayed actor and alpha steps and the Polyak target; its state loads
with weights_only; a run is reproducible from its seed; a discrete or unbounded env is refused with a
message; it learns Pendulum-v1 with configs/pendulum_sac.yaml.
"""

from __future__ import annotations

import collections
import copy
import io
import math
from pathlib import Path

import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from trainer.algos.base import Progress, Setup
from trainer.algos.sac import SAC, alpha_loss, alpha_loss_gradient, soft_target
from trainer.config.checks import ConfigError
from trainer.config.defaults import load_config
from trainer.config.validation import config_from_dict
from trainer.nets.sac_actor import SquashedGaussianActor, TwinQ, squashed_log_prob
from trainer.nets.spec import ModelError
from trainer.nets.torso import mlp
from trainer.run.events import EventBus
from trainer.run.loop import TrainingSession, train

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def actor_spec(low=(-2.0,), high=(2.0,)) -> dict:
    action = {"kind": "continuous", "dim": len(low), "low": list(low), "high": list(high)}
    return {"model_type": "ppo-small", "hidden_sizes": [8], "obs_shape": [3], "obs_scale": 1.0, "action": action}


# -- the formulas -----------------------------------------------------------------------------------


def test_squashed_log_prob_is_the_density_of_the_tanh_of_a_gaussian():
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(64, 3, generator=generator, dtype=torch.float64)
    log_std = torch.rand(64, 3, generator=generator, dtype=torch.float64) * 3 - 2
    u = mean + log_std.exp() * torch.randn(64, 3, generator=generator, dtype=torch.float64)
    u = u.clamp(-4, 4)  # atanh(tanh(u)) inside torch.distributions stays exact here

    squashed = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
    expected = squashed.log_prob(torch.tanh(u)).sum(-1)
    torch.testing.assert_close(squashed_log_prob(u, mean, log_std), expected)

    # The correction is log |d tanh(u) / du|, here from autograd: log pi(a) = log N(u) - sum log tanh'(u).
    u_leaf = u.clone().requires_grad_(True)
    (slope,) = torch.autograd.grad(torch.tanh(u_leaf).sum(), u_leaf)
    naive = (Normal(mean, log_std.exp()).log_prob(u) - slope.log()).sum(-1)
    torch.testing.assert_close(squashed_log_prob(u, mean, log_std), naive)


def test_the_stable_correction_stays_finite_where_tanh_saturates():
    u = torch.tensor([[-30.0], [0.0], [30.0]])
    log_prob = squashed_log_prob(u, torch.zeros_like(u), torch.zeros_like(u))
    assert torch.isfinite(log_prob).all()
    # log(1 - tanh(30)^2) = log(4) - 60 (to float precision): the density is huge near the bound.
    assert log_prob[2].item() == pytest.approx(-0.5 * 900 - 0.5 * math.log(2 * math.pi) - (math.log(4) - 60), rel=1e-6)


def test_the_actor_samples_in_bounds_with_the_log_prob_of_what_it_played():
    actor = SquashedGaussianActor(actor_spec(low=(-2.0, 0.0), high=(2.0, 1.0)))
    obs = torch.randn(256, 3, generator=torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(5)
    replay = torch.Generator().manual_seed(5)
    squashed, log_prob = actor.sample(obs, generator)
    with torch.no_grad():
        mean, log_std = actor(obs)
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=replay)
        torch.testing.assert_close(squashed, torch.tanh(u))
        torch.testing.assert_close(log_prob, squashed_log_prob(u, mean, log_std))
        assert log_std.min() >= -5.0 and log_std.max() <= 2.0
        action, _, _ = actor.act(obs, torch.Generator().manual_seed(2))
        assert (action[:, 0].abs() <= 2.0).all() and (action[:, 1] >= 0).all() and (action[:, 1] <= 1).all()
        greedy, greedy_log_prob, _ = actor.act(obs, deterministic=True)
        torch.testing.assert_close(greedy, actor.to_env_scale(torch.tanh(mean)))
        assert (greedy_log_prob == 0).all()


def test_the_alpha_loss_moves_alpha_towards_the_target_entropy():
    generator = torch.Generator().manual_seed(3)
    mean = torch.randn(512, 2, generator=generator, dtype=torch.float64)
    log_std = torch.full((512, 2), -3.0, dtype=torch.float64)
    u = mean + log_std.exp() * torch.randn(512, 2, generator=generator, dtype=torch.float64)
    log_prob = squashed_log_prob(u, mean, log_std)
    reference = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
    reference_log_prob = reference.log_prob(torch.tanh(u)).sum(-1)
    target_entropy = -2.0
    for log_alpha_value in (-1.0, 0.5):
        log_alpha = torch.tensor(log_alpha_value, dtype=torch.float64, requires_grad=True)
        loss = alpha_loss(log_alpha, log_prob, target_entropy)
        (gradient,) = torch.autograd.grad(loss, log_alpha)
        # d/d log_alpha of mean(-alpha (log pi + H_target)) = -alpha (mean log pi + H_target)
        expected = -math.exp(log_alpha_value) * (reference_log_prob.mean().item() + target_entropy)
        assert gradient.item() == pytest.approx(expected, rel=1e-3)
        # The update steps alpha with this gradient written out (no backward pass): the same number.
        written = alpha_loss_gradient(log_alpha, log_prob, target_entropy)
        assert written.item() == pytest.approx(gradient.item(), rel=1e-12)
    # This narrow policy's entropy (-mean log pi) is below -2: a step raises alpha (more exploration).
    assert -log_prob.mean() < target_entropy and gradient < 0
    wide = squashed_log_prob(mean, mean, torch.zeros_like(mean))  # sigma 1: entropy above -2
    (gradient,) = torch.autograd.grad(alpha_loss(log_alpha, wide, target_entropy), log_alpha)
    assert -wide.mean() > target_entropy and gradient > 0


def test_soft_target_matches_plain_python():
    generator = torch.Generator().manual_seed(4)
    returns, next_q1, next_q2, next_log_prob = torch.randn(4, 16, generator=generator)
    discounts = torch.tensor([0.99, 0.0, 0.99**3, 0.98] * 4)
    alpha = 0.3
    target = soft_target(returns, discounts, next_q1, next_q2, next_log_prob, alpha)
    for i in range(16):
        value = min(float(next_q1[i]), float(next_q2[i])) - alpha * float(next_log_prob[i])
        assert float(target[i]) == pytest.approx(float(returns[i]) + float(discounts[i]) * value, rel=1e-5, abs=1e-6)


def test_the_twin_critics_are_two_separate_mlps_and_their_old_checkpoints_load():
    spec = {**actor_spec(), "hidden_sizes": [8, 8]}
    torch.manual_seed(0)
    separate = [mlp(4, (8, 8), 1, 1.0, torch.nn.ReLU) for _ in range(2)]  # Q1, Q2 as two MLPs
    torch.manual_seed(0)
    critic = TwinQ(spec)  # evaluated as one ensemble, from the same seed
    obs, action = torch.randn(5, 3), torch.rand(5, 1) * 2 - 1
    joined = torch.cat((obs, action), -1)
    q1, q2 = critic(obs, action)
    torch.testing.assert_close(q1, separate[0](joined).squeeze(-1))
    torch.testing.assert_close(q2, separate[1](joined).squeeze(-1))
    assert not torch.allclose(q1, q2)  # two critics, not one twice

    # A checkpoint written when the critics were two MLPs (keys q1.*, q2.*) loads into the ensemble.
    saved = {f"q{k + 1}.{name}": value for k, net in enumerate(separate) for name, value in net.state_dict().items()}
    torch.manual_seed(1)
    restored = TwinQ(spec)
    assert not torch.allclose(restored(obs, action), critic(obs, action))
    restored.load_state_dict(saved)
    torch.testing.assert_close(restored(obs, action), critic(obs, action))


def test_the_written_critic_gradient_is_autograds_on_the_critic_loss():
    critic = TwinQ({**actor_spec(), "hidden_sizes": [16, 16]})
    generator = torch.Generator().manual_seed(3)
    obs, action = torch.randn(32, 3, generator=generator), torch.rand(32, 1, generator=generator) * 2 - 1
    target, weights = torch.randn(32, generator=generator), torch.rand(32, generator=generator) + 0.1
    q1, q2 = critic(obs, action)  # the reference: autograd on the loss as the docstring writes it
    loss = (weights * (q1 - target).square()).mean() + (weights * (q2 - target).square()).mean()
    expected = torch.autograd.grad(loss, list(critic.parameters()))

    for parameter in critic.parameters():
        parameter.grad = torch.full_like(parameter, 7.0)  # overwritten, not added to
    q, inputs = critic.values_and_inputs(obs, action)
    torch.testing.assert_close(q, torch.stack((q1, q2)).detach())
    critic.write_gradient(inputs, 2.0 * weights * (q - target) / 32)  # dL/dQk = 2 w ek / B
    for parameter, gradient in zip(critic.parameters(), expected, strict=True):
        torch.testing.assert_close(parameter.grad, gradient)


# -- one update -------------------------------------------------------------------------------------


def small_config(**overrides):
    raw = {
        "algo": "sac",
        "env_name": "Pendulum-v1",
        "env_kwargs": {"max_episode_steps": 10},  # time limits inside the buffer
        "num_envs": 2,
        "num_steps": 8,
        "hidden_sizes": [8],
        "mini_batch_size": 32,
        "buffer_size": 400,
        "learning_starts": 0,
        "gradient_steps": 1,
        "anneal_lr": False,
        "learning_rate": 1e-3,
        "gamma": 0.9,
        "norm_obs": False,
        "norm_reward": False,
        "total_timesteps": 1600,
        "gif_interval": 0,
        "device": "cpu",
        "seed": 4,
        "checkpoint": {"interval": 0},
    }
    return config_from_dict({**raw, **overrides})


def filled_session(updates: int = 5, **overrides) -> TrainingSession:
    session = TrainingSession(small_config(**overrides), None, EventBus())
    obs = session.next_obs
    for update in range(1, updates + 1):
        obs = session.algorithm.collect(obs, Progress(update, 100, (update - 1) * 16, 1e-3))
    return session


def plain_log_prob(u: float, mean: float, log_std: float) -> float:
    """log N(u; mean, sigma) - log(1 - tanh(u)^2), written directly."""
    std = math.exp(log_std)
    return -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(u) ** 2)


def test_one_update_matches_a_plain_python_soft_target():
    session = filled_session(n_step=3, use_per=True, autotune=False, alpha=0.5)
    try:
        sac, config = session.algorithm, session.config
        with torch.no_grad():  # target critics far from the critics: using the wrong ones shows
            for parameter in sac.critic_target.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(8)))
        items = torch.arange(sac.buffer.rows * sac.buffer.num_envs)
        items = items[sac.buffer.tree.get(items) > 0]
        sac.buffer.update_priorities(items, torch.rand(len(items), generator=torch.Generator().manual_seed(9)) * 3)
        replay = torch.Generator()
        replay.set_state(session.generator.get_state())
        beta = config.per_beta + (1 - config.per_beta) * 6 / 100
        batch = sac.buffer.sample(config.mini_batch_size, replay, beta)  # what the update will draw
        noise = torch.randn((config.mini_batch_size, 1), generator=replay)  # then a' ~ pi(.|s')
        policy, critic, target = copy.deepcopy(sac.policy), copy.deepcopy(sac.critic), copy.deepcopy(sac.critic_target)
        metrics = sac.update(Progress(update=6, num_updates=100, global_step=80, learning_rate=1e-3))
    finally:
        session.close()

    with torch.no_grad():
        mean, log_std = policy(batch.next_obs)
        u = mean + log_std.exp() * noise
        next_q1, next_q2 = target(batch.next_obs, torch.tanh(u))
        q1, q2 = critic(batch.obs, batch.actions)
    size, alpha = config.mini_batch_size, 0.5
    log_probs = [plain_log_prob(float(u[i]), float(mean[i]), float(log_std[i])) for i in range(size)]
    targets = [
        float(batch.returns[i])
        + float(batch.discounts[i]) * (min(float(next_q1[i]), float(next_q2[i])) - alpha * log_probs[i])
        for i in range(size)
    ]
    errors1 = [float(q1[i]) - targets[i] for i in range(size)]
    errors2 = [float(q2[i]) - targets[i] for i in range(size)]
    weights = batch.weights.tolist()
    # The batch holds what the target must get right: n-step windows cut by time limits, unequal weights.
    assert {round(d, 4) for d in batch.discounts.tolist()} >= {0.9, 0.81, 0.729} and min(weights) < 1.0

    loss = sum(w * (e1 * e1 + e2 * e2) for w, e1, e2 in zip(weights, errors1, errors2)) / size
    assert metrics["value_loss"] == pytest.approx(loss, rel=1e-4)
    td_errors = [0.5 * (abs(e1) + abs(e2)) for e1, e2 in zip(errors1, errors2)]
    assert metrics["td_error_mean"] == pytest.approx(sum(td_errors) / size, rel=1e-4)
    assert metrics["q_value_mean"] == pytest.approx(float(q1.mean() + q2.mean()) / 2, rel=1e-4, abs=1e-6)
    assert metrics["entropy"] == pytest.approx(-sum(log_probs) / size, rel=1e-4, abs=1e-5)
    assert metrics["alpha"] == pytest.approx(0.5) and metrics["gradient_steps"] == 1
    assert metrics["policy_loss"] is None  # gradient step 1 of policy_frequency 2: no actor step yet
    assert metrics["buffer_size"] == 80


def parameters(module) -> list[torch.Tensor]:
    return [parameter.detach().clone() for parameter in module.parameters()]


@pytest.mark.parametrize("autotune", [True, False], ids=["autotune", "fixed-alpha"])
def test_actor_and_alpha_step_every_policy_frequency_and_the_targets_follow(autotune):
    session = filled_session(gradient_steps=1, policy_frequency=2, tau=0.25, autotune=autotune)
    try:
        sac = session.algorithm
        actor_before, alpha_before = parameters(sac.policy), float(sac.alpha)
        first = sac.update(Progress(6, 100, 80, 1e-3))  # gradient step 1: critics only
        assert first["policy_loss"] is None
        assert all(torch.equal(a, b) for a, b in zip(parameters(sac.policy), actor_before))
        target_before, critic_before = parameters(sac.critic_target), parameters(sac.critic)
        second = sac.update(Progress(7, 100, 96, 1e-3))  # step 2: then 2 steps of the actor (and alpha)
        assert isinstance(second["policy_loss"], float)
        assert all(not torch.equal(a, b) for a, b in zip(parameters(sac.policy), actor_before))
        assert (float(sac.alpha) != alpha_before) == autotune
        critic_after = parameters(sac.critic)
        for after, before, followed in zip(parameters(sac.critic_target), target_before, critic_after):
            torch.testing.assert_close(after, before + 0.25 * (followed - before))
        assert any(not torch.equal(a, b) for a, b in zip(critic_after, critic_before))
    finally:
        session.close()


def test_nothing_is_learned_before_learning_starts_and_the_metrics_say_so(tmp_path):
    events = []
    train(small_config(learning_starts=64, total_timesteps=96), tmp_path / "run", sinks=[events.append])
    metrics = [event for event in events if event["type"] == "metrics"]
    assert [event["buffer_size"] for event in metrics] == [16, 32, 48, 64, 80, 96]
    for event in metrics[:3]:  # 16, 32, 48 steps done, fewer than learning_starts: nothing learned
        assert event["gradient_steps"] == 0 and event["alpha"] == pytest.approx(0.2)
        assert event["value_loss"] is None and event["policy_loss"] is None and event["entropy"] is None
    assert all(event["gradient_steps"] == 1 and math.isfinite(event["value_loss"]) for event in metrics[3:])


# -- state, reproducibility, the options ------------------------------------------------------------


def test_its_state_loads_with_weights_only_into_a_new_run():
    first, second = filled_session(use_per=True), filled_session(updates=0, use_per=True, seed=5)
    try:
        first.algorithm.update(Progress(6, 100, 80, 1e-3))
        first.algorithm.update(Progress(7, 100, 96, 1e-3))
        saved = io.BytesIO()
        torch.save(first.algorithm.state_dict(), saved)
        saved.seek(0)
        second.algorithm.load_state_dict(torch.load(saved, weights_only=True))
        a, b = first.algorithm, second.algorithm
        for one, other in ((a.critic, b.critic), (a.critic_target, b.critic_target)):
            assert all(torch.equal(x, y) for x, y in zip(parameters(one), parameters(other)))
        assert torch.equal(a.log_alpha, b.log_alpha) and a.gradient_step == b.gradient_step == 2
        assert b.buffer.size == 80 and torch.equal(a.buffer.obs, b.buffer.obs)
        assert b.actor_optimizer.state_dict()["step"] == a.actor_optimizer.state_dict()["step"] > 0
    finally:
        first.close()
        second.close()


def test_a_state_without_the_buffer_says_what_a_resume_loses():
    first, second = filled_session(save_buffer=False), filled_session(updates=0, save_buffer=False)
    try:
        lines = []
        second.algorithm.setup.log = lines.append
        second.algorithm.load_state_dict(first.algorithm.state_dict())
        assert second.algorithm.buffer.size == 0
        assert any("without the replay buffer" in line and "80 transitions" in line for line in lines), lines
    finally:
        first.close()
        second.close()


def test_a_stopped_run_resumes_with_its_buffer(tmp_path):
    config = small_config(total_timesteps=160, learning_starts=48, gradient_steps=2)
    events = []
    stopped = train(
        config,
        tmp_path / "run",
        sinks=[events.append],
        should_stop=lambda: sum(event["type"] == "metrics" for event in events) >= 5,
    )
    assert stopped.status == "stopped" and stopped.step == 80
    resumed = train(config, tmp_path / "run", resume=True)
    assert resumed.status == "finished" and resumed.step == 160
    assert resumed.last_metrics["buffer_size"] == 160  # the 80 saved transitions came back
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resumed from" in log and "replay buffer" not in log


@pytest.mark.parametrize(
    "options", [{}, {"use_per": True, "n_step": 3, "autotune": False}], ids=["plain", "per-n-step"]
)
def test_the_same_seed_trains_the_same_weights(tmp_path, options):
    config = small_config(total_timesteps=160, gradient_steps=2, learning_starts=48, **options)
    first, second = train(config, tmp_path / "first"), train(config, tmp_path / "second")
    assert first.last_metrics["gradient_steps"] == 2 and math.isfinite(first.last_metrics["value_loss"])
    for name, tensor in first.policy.state_dict().items():
        assert torch.equal(tensor, second.policy.state_dict()[name]), name
    other = train(
        small_config(total_timesteps=160, gradient_steps=2, learning_starts=48, seed=5, **options), tmp_path / "o"
    )
    assert any(not torch.equal(t, other.policy.state_dict()[n]) for n, t in first.policy.state_dict().items())


# -- what it refuses --------------------------------------------------------------------------------


def test_a_discrete_env_is_refused_before_the_run_starts_and_by_the_actor(tmp_path):
    with pytest.raises(ConfigError, match="algo sac takes continuous actions, but cartpole has discrete") as refused:
        train({"algo": "sac", "env_name": "cartpole", "gif_interval": 0, "device": "cpu"}, tmp_path / "run")
    assert "dqn" in str(refused.value) and not (tmp_path / "run").exists()  # preflight: nothing written
    with pytest.raises(ModelError, match="algo sac needs continuous actions"):  # a spec built by hand
        SquashedGaussianActor({**actor_spec(), "action": {"kind": "discrete", "n": 2}})


def test_unbounded_actions_and_a_stuck_alpha_are_refused():
    with pytest.raises(ModelError, match="not finite"):
        SquashedGaussianActor(actor_spec(low=(-math.inf,), high=(math.inf,)))
    with pytest.raises(ConfigError, match="autotune"):
        TrainingSession(small_config(alpha=0.0), None, EventBus())
    config = small_config()
    setup = Setup(config, None, torch.device("cpu"), actor_spec(), torch.Generator(), reduce_mean=lambda tensor: None)
    with pytest.raises(ValueError, match="algo sac learns in one process"):
        SAC(setup)


# -- it learns --------------------------------------------------------------------------------------


class RecentEpisodes:
    """Sink: the best mean return of the last `size` episodes, and a stop once `target` is reached."""

    def __init__(self, size: int, target: float):
        self.returns, self.target, self.best = collections.deque(maxlen=size), target, -math.inf

    def __call__(self, event):
        if event["type"] == "metrics" and event["episodes_this_update"]:
            self.returns.extend([event["episode_return_mean"]] * event["episodes_this_update"])
            if len(self.returns) == self.returns.maxlen:
                self.best = max(self.best, sum(self.returns) / len(self.returns))

    def reached(self) -> bool:
        return self.best >= self.target


# configs/pendulum_sac.yaml passed -300 (mean of the last 16 episodes) after 6.4k of its 30k steps on
# seeds 1-4 (random play: about -1200 to -1500); each seed took 21 s on the 2-core dev machine
# (up to 45 s while other jobs ran).
@pytest.mark.parametrize("seed", [1, 2])
def test_sac_learns_pendulum_with_the_shipped_config(tmp_path, seed):
    config = load_config(ROOT / "configs" / "pendulum_sac.yaml", [f"seed={seed}", "gif_interval=0", "device=cpu"])
    recorder = RecentEpisodes(16, target=-300)
    result = train(config, tmp_path / "run", sinks=[recorder], should_stop=recorder.reached)
    assert recorder.best >= -300, f"Pendulum-v1 seed {seed}: the last 16 episodes only reached {recorder.best:.0f}"
    assert result.step <= config.total_timesteps
