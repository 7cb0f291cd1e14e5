"""Action masks: an env says which actions are allowed (`VecEnv.action_masks`, a Gymnasium env's
info["action_mask"]), and a forbidden action is never taken: not when sampling, not by the greedy
policy, not in the loss, not through ONNX or the policy server. A mask that allows nothing is a
clear error, never NaN."""

import re

import gymnasium
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from envs import make_vec_env
from envs.gym_vec import GymVecEnv
from trainer.algos.ppo_fast import ppo_loss_and_gradient, structure_of
from trainer.algos.ppo_gradient import ppo_loss
from trainer.algos.ppo_settings import UpdateBatch, UpdateSettings
from trainer.algos.rollout import RolloutBuffer, collect_rollout
from trainer.nets.build import build_policy
from trainer.nets.masks import ActionMaskError
from trainer.nets.spec import make_policy_spec
from trainer.run.checkpoint import TrainedModel
from trainer.serving.serve import create_app

pytestmark = pytest.mark.usefixtures("one_torch_thread")
N_ACTIONS = 4


def policy_for(obs_size: int, n: int = N_ACTIONS, model_type: str = "ppo-small", network: str | None = None):
    spec = make_policy_spec(model_type, gymnasium.spaces.Box(-1, 1, (obs_size,)), gymnasium.spaces.Discrete(n))
    if network is not None:
        spec["network"] = network
    torch.manual_seed(0)
    return spec, build_policy(spec)


def favour(policy, action: int, by: float = 20.0) -> None:
    """Make `action` by far the policy's favourite, so a mask that leaks would show at once."""
    with torch.no_grad():
        policy.actor[-1].bias.zero_()
        policy.actor[-1].bias[action] = by


def random_masks(rows: int, n: int = N_ACTIONS, seed: int = 0, forbid: int | None = None) -> torch.Tensor:
    """Random masks with at least one allowed action per row (never `forbid`)."""
    masks = torch.rand((rows, n), generator=torch.Generator().manual_seed(seed)) < 0.5
    if forbid is not None:
        masks[:, forbid] = False
    allowed = torch.randint(0, n - 1, (rows,), generator=torch.Generator().manual_seed(seed + 1))
    if forbid is not None:
        allowed += allowed >= forbid  # any action but `forbid`
    masks[torch.arange(rows), allowed] = True
    return masks


# -- the policy ------------------------------------------------------------------------------------


def test_sampling_never_draws_a_forbidden_action_even_the_favourite():
    _, policy = policy_for(6)
    favour(policy, 0)
    obs = torch.randn(20_000, 6)
    masks = random_masks(len(obs), forbid=0)  # the favourite is always forbidden
    actions, log_probs, _ = policy.act(obs, torch.Generator().manual_seed(1), action_mask=masks)
    assert masks[torch.arange(len(obs)), actions].all()
    assert torch.isfinite(log_probs).all()
    # The rollout's sampler, with Gumbel draws of -inf among its noise, keeps to the mask too.
    noise = policy.action_noise(1, len(obs), torch.Generator().manual_seed(2))[0]
    noise[::7] = float("-inf")
    sampled = policy.sampler()(obs, noise, masks)
    assert masks[torch.arange(len(obs)), sampled].all()
    # Without a mask the favourite wins almost every draw: the mask is what kept it out.
    assert (policy.act(obs[:1000], torch.Generator().manual_seed(3))[0] == 0).float().mean() > 0.9


def test_masked_probabilities_are_exactly_zero_and_the_loss_is_finite():
    _, policy = policy_for(6)
    favour(policy, 2)
    obs, masks = torch.randn(512, 6), random_masks(512, seed=4, forbid=2)
    actions = policy.act(obs, torch.Generator().manual_seed(5), action_mask=masks)[0]
    log_probs, entropy, _ = policy.evaluate(obs, actions, masks)
    probs = policy.exported(obs, True, masks)[1]
    assert (probs[~masks] == 0).all() and torch.allclose(probs.sum(-1), torch.ones(512))
    assert torch.isfinite(log_probs).all() and torch.isfinite(entropy).all()
    # pi_old as the rollout scores it is the same masked distribution.
    old_log_probs, _ = policy.score(obs, actions, masks)
    torch.testing.assert_close(old_log_probs, log_probs.detach())
    # Gradient: none reaches a forbidden action's logit; the written-out gradient agrees with autograd.
    batch = UpdateBatch(obs, actions, old_log_probs, torch.randn(512), torch.randn(512), torch.randn(512), masks)
    settings = UpdateSettings(ent_coef=0.01, mini_batch_size=512)
    advantages = batch.advantages
    policy.zero_grad()
    loss, losses, _ = ppo_loss(policy, batch, advantages, None, settings)
    loss.backward()
    assert torch.isfinite(loss)
    autograd = [p.grad.clone() for p in policy.parameters()]
    for parameter in policy.parameters():
        parameter.grad = torch.zeros_like(parameter)
    written_losses, _ = ppo_loss_and_gradient(structure_of(policy), batch, advantages, None, settings)
    torch.testing.assert_close(written_losses, losses, rtol=1e-5, atol=1e-6)
    for expected, parameter in zip(autograd, policy.parameters()):
        torch.testing.assert_close(parameter.grad, expected, rtol=1e-4, atol=1e-6)


def test_q_network_acts_greedily_among_the_allowed_actions():
    _, q_net = policy_for(6, network="q")
    obs = torch.randn(300, 6)
    masks = random_masks(300, seed=6)
    actions, _, values = q_net.act(obs, action_mask=masks)
    q = q_net(obs)
    assert masks[torch.arange(300), actions].all()
    torch.testing.assert_close(values, q.masked_fill(~masks, float("-inf")).max(-1).values)


def test_a_mask_that_allows_nothing_is_a_clear_error():
    _, policy = policy_for(6)
    masks = torch.ones((3, N_ACTIONS), dtype=torch.bool)
    masks[1] = False
    with pytest.raises(ActionMaskError, match=r"allows no action at row \[1\]"):
        policy.act(torch.randn(3, 6), action_mask=masks)
    model = trained_model(*policy_for(6))
    with pytest.raises(ActionMaskError, match="allows no action"):
        model.predict(np.zeros((3, 6), np.float32), action_masks=masks.numpy())
    with pytest.raises(ActionMaskError, match=r"shape \(3, 3\)"):
        model.predict(np.zeros((3, 6), np.float32), action_masks=np.ones((3, 3), bool))


# -- Snake -----------------------------------------------------------------------------------------


def test_snake_masks_the_move_into_its_neck_and_never_takes_it():
    env = make_vec_env("snake", num_envs=64, seed=0, action_mode="absolute")
    assert make_vec_env("snake", num_envs=2).action_masks() is None  # relative: nothing to forbid
    _, policy = policy_for(18)
    buffer = RolloutBuffer.allocate(32, 64, (18,), policy, torch.device("cpu"))
    obs = env.reset(seed=0)
    for _ in range(3):
        heading_before = env.heading.clone()
        masks = env.action_masks()
        assert (masks.sum(-1) == 3).all() and not masks[torch.arange(64), (heading_before + 2) % 4].any()
        # A policy that wants to reverse, every step: the mask keeps it from ever doing so.
        favour(policy, 0)
        obs = collect_rollout(env, policy, buffer, obs, torch.Generator().manual_seed(0), None)
        taken = buffer.actions.unsqueeze(-1)
        assert buffer.action_masks.gather(-1, taken).all()
        assert (buffer.actions != 0).any() and (buffer.action_masks.sum(-1) == 3).all()


def test_snake_single_env_reports_its_mask_in_info_as_sb3_contrib_reads_it():
    env = gymnasium.make("Snake-v0", action_mode="absolute")
    _, info = env.reset(seed=1)
    heading = int(env.unwrapped._game.heading[0])
    assert info["action_mask"].tolist() == [a != (heading + 2) % 4 for a in range(4)]
    assert env.unwrapped.action_masks().tolist() == info["action_mask"].tolist()


# -- a Gymnasium env with info["action_mask"] ---------------------------------------------------------


class ForbiddenJackpot(gymnasium.Env):
    """Obs: one-hot state s of 4. Action s is forbidden (and would pay 10); (s + 1) % 4 pays 1, the
    others 0. Taking the forbidden action raises, so a mask that leaks fails the run."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(4)

    def _obs(self):
        obs = np.zeros(4, np.float32)
        obs[self.state] = 1.0
        mask = np.ones(4, np.int8)  # 0 / 1, as Gymnasium's Taxi reports it
        mask[self.state] = 0
        return obs, {"action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state, self.steps = int(self.np_random.integers(4)), 0
        return self._obs()

    def step(self, action):
        if int(action) == self.state:
            raise RuntimeError(f"forbidden action {action} taken in state {self.state}")
        reward = 1.0 if int(action) == (self.state + 1) % 4 else 0.0
        self.state, self.steps = int(self.np_random.integers(4)), self.steps + 1
        obs, info = self._obs()
        return obs, reward, False, self.steps >= 8, info


@pytest.mark.parametrize("mode", ["sync", "async", "pool"])
def test_gymnasium_info_action_mask_reaches_the_vec_env(mode):
    extra = {"num_workers": 2} if mode == "pool" else {}
    env = GymVecEnv(ForbiddenJackpot, num_envs=4, seed=3, mode=mode, **extra)
    try:
        obs = env.reset(seed=3)
        for _ in range(20):  # through episode ends: the mask is always the current observation's
            masks = env.action_masks()
            assert torch.equal(masks, obs == 0)
            actions = masks.float().multinomial(1, generator=torch.Generator().manual_seed(0)).squeeze(1)
            obs = env.step(actions)[0]
    finally:
        env.close()
    assert make_vec_env("CartPole-v1", num_envs=2).action_masks() is None


def test_ppo_learns_a_gymnasium_env_through_its_masks(tmp_path):
    from trainer import PPO

    with PPO(ForbiddenJackpot, num_envs=8, num_steps=16, seed=0, learning_rate=3e-3, ent_coef=0.0) as model:
        model.learn(8 * 16 * 25)
        obs = np.eye(4, dtype=np.float32)
        masks = obs == 0
        # Greedy: the paying action in every state, never the forbidden jackpot.
        actions = model.predict(obs, deterministic=True, action_masks=masks)[0]
        assert actions.tolist() == [1, 2, 3, 0]


def test_dqn_never_takes_a_forbidden_action():
    from trainer import DQN

    with DQN(ForbiddenJackpot, num_envs=4, num_steps=8, seed=0, learning_starts=64, buffer_size=2048) as model:
        model.learn(4 * 8 * 20)  # the env raises on a forbidden action, exploring or greedy


# -- ONNX and the policy server -----------------------------------------------------------------------


def trained_model(spec, policy) -> TrainedModel:
    payload = {"policy_spec": spec, "config": {"env_name": "snake"}, "global_step": 1}
    return TrainedModel(policy.eval(), payload, torch.device("cpu"))


def test_onnx_export_with_and_without_the_mask_input_matches_torch(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="optional extra: pip install -r requirements-export.txt")
    pytest.importorskip("onnx", reason="optional extra")
    from trainer.serving.export import export_onnx

    for network in (None, "q"):
        spec, policy = policy_for(18, network=network)
        if network is None:
            favour(policy, 3, by=5.0)
        model = trained_model(spec, policy)
        obs = np.random.default_rng(0).standard_normal((64, 18)).astype(np.float32)
        masks = random_masks(64, seed=8).numpy()
        plain = ort.InferenceSession(
            str(export_onnx(model, tmp_path / "plain.onnx")), providers=["CPUExecutionProvider"]
        )
        assert [i.name for i in plain.get_inputs()] == ["obs"]
        np.testing.assert_array_equal(plain.run(None, {"obs": obs})[0], model.predict(obs)[0])
        path = export_onnx(model, tmp_path / "masked.onnx", with_details=True, with_mask=True)
        masked = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert [i.name for i in masked.get_inputs()] == ["obs", "action_mask"]
        outputs = masked.run(None, {"obs": obs, "action_mask": masks})
        expected = model.predict(obs, action_masks=masks)[0]
        np.testing.assert_array_equal(outputs[0], expected)
        assert masks[np.arange(64), outputs[0]].all()
        if network is None:  # probabilities of forbidden actions: exactly 0
            assert (outputs[1][~masks] == 0).all()
            np.testing.assert_allclose(
                outputs[1],
                policy.exported(torch.as_tensor(obs), True, torch.as_tensor(masks))[1].detach().numpy(),
                atol=1e-6,
            )


def test_policy_server_takes_a_mask_per_request_and_refuses_a_bad_one():
    spec, policy = policy_for(18)
    favour(policy, 1)
    client = TestClient(create_app(trained_model(spec, policy)))
    obs = np.zeros(18).tolist()
    assert client.post("/v1/act", json={"obs": obs}).json() == {"actions": [1]}
    answer = client.post("/v1/act", json={"obs": obs, "action_mask": [True, False, True, True]})
    assert answer.status_code == 200 and answer.json()["actions"][0] != 1
    batch = client.post("/v1/act", json={"obs": [obs, obs], "action_mask": [[1, 0, 0, 0], [0, 0, 1, 0]]})
    assert batch.json() == {"actions": [0, 2]}
    for bad, message in (
        ([True, False], r"shape \[2\]"),
        ([[True] * 4, [True] * 4], r"shape \[2, 4\]"),
        ([False] * 4, "allows no action for observation 0"),
        (["yes"] * 4, "true / false"),
    ):
        answer = client.post("/v1/act", json={"obs": obs, "action_mask": bad})
        assert answer.status_code == 422, answer.text
        assert re.search(message, answer.json()["detail"]), answer.json()


def test_the_rollout_stores_each_group_s_masks_with_the_asynchronous_pool():
    env = GymVecEnv(ForbiddenJackpot, num_envs=4, seed=5, mode="async_pool", num_workers=2)
    try:
        _, policy = policy_for(4)
        favour(policy, 0)
        buffer = RolloutBuffer.allocate(16, 4, (4,), policy, torch.device("cpu"))
        obs = env.reset(seed=5)
        collect_rollout(env, policy, buffer, obs, torch.Generator().manual_seed(0), None)  # raises if one leaks
        assert torch.equal(buffer.action_masks, buffer.obs == 0)
    finally:
        env.close()


def test_a_rollout_whose_env_allows_nothing_somewhere_stops_with_a_clear_error():
    class NothingAllowedForEnv1(type(make_vec_env("snake", num_envs=1))):
        def action_masks(self):
            masks = super().action_masks().clone()
            masks[1] = False
            return masks

    env = NothingAllowedForEnv1(num_envs=3, seed=0, action_mode="absolute")
    _, policy = policy_for(18)
    buffer = RolloutBuffer.allocate(4, 3, (18,), policy, torch.device("cpu"))
    with pytest.raises(ActionMaskError, match=r"action_masks\(\) at \[step, env\] allows no action at row \[0, 1\]"):
        collect_rollout(env, policy, buffer, env.reset(seed=0), torch.Generator().manual_seed(0), None)
