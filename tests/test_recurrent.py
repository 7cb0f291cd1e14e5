"""Recurrent policies (`model_type: ppo-lstm`, trainer/nets/recurrent.py, trainer/algos/recurrent_ppo.py):
the state resets exactly where episodes end, the update replays the rollout's own history, a run
resumes bit-identically, ONNX plays an episode as torch does, predict and the policy server carry
the state, what does not combine is refused, and the LSTM learns CartPole with its velocities hidden."""

import time

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from envs import make_vec_env
from trainer.algos.recurrent_ppo import Sequences, collect_sequences
from trainer.algos.rollout import RolloutBuffer
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.nets.build import build_policy
from trainer.nets.spec import make_policy_spec
from trainer.run.checkpoint import TrainedModel
from trainer.run.loop import train
from trainer.serving.serve import create_app

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NO_VELOCITY = ["envs.hide_velocity:CartPoleNoVelocity"]


def lstm_policy(env, seed=0):
    torch.manual_seed(seed)
    spec = make_policy_spec("ppo-lstm", env.single_observation_space, env.single_action_space)
    return spec, build_policy(spec)


class StateRecorder:
    """Wraps policy.step to record the state every step started from."""

    def __init__(self, policy):
        self.inputs, self.step = [], policy.step
        policy.step = self

    def __call__(self, obs, state, episode_start=None):
        self.inputs.append(state.clone())
        return self.step(obs, state, episode_start)


def test_the_state_resets_exactly_where_episodes_end_and_the_update_replays_the_same_history():
    env = make_vec_env("cartpole", 6, seed=4, max_episode_steps=12)  # time limits and crashes both
    spec, policy = lstm_policy(env)
    with torch.no_grad():
        policy.actor.weight.mul_(100.0)  # log-probabilities far from uniform: a wrong history would show
    steps = 40
    buffer = RolloutBuffer.allocate(steps, 6, (4,), policy, torch.device("cpu"))
    state = policy.initial_state(6)
    states_after = torch.zeros((steps, *state.shape))
    recorder = StateRecorder(policy)
    obs = env.reset(seed=4)
    collect_sequences(env, policy, buffer, obs, state, states_after, torch.Generator().manual_seed(1), None)
    done = buffer.terminated | buffer.truncated
    assert (buffer.truncated & ~buffer.terminated).any() and buffer.terminated.any()
    for t in range(steps - 1):
        following = recorder.inputs[t + 1]  # (2, N, size): what step t + 1 started from
        for env_index in range(6):
            if done[t, env_index]:  # a new episode (the env auto-reset): no memory at all
                assert torch.equal(following[:, env_index], torch.zeros_like(following[:, env_index]))
            else:
                assert torch.equal(following[:, env_index], states_after[t][:, env_index])
                assert following[:, env_index].abs().sum() > 0
    # The update replays each env's whole sequence from the rollout's initial state with the same
    # resets, so its pi and V are the rollout's.
    policy.step = recorder.step
    advantages = torch.zeros(steps, 6)
    sequences = Sequences.of(buffer, advantages, advantages, recorder.inputs[0])
    minibatch = sequences.envs(torch.tensor([4, 1, 2]))
    with torch.no_grad():
        log_prob, _, value = policy.evaluate(
            minibatch.obs, minibatch.actions, minibatch.initial_state, minibatch.starts
        )
    torch.testing.assert_close(log_prob, minibatch.log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(value, minibatch.values, atol=1e-5, rtol=0)


def tiny_lstm_config(**overrides):
    raw = {
        "env_name": "cartpole",
        "model_type": "ppo-lstm",
        "num_envs": 4,
        "num_steps": 16,
        "mini_batch_size": 32,  # 2 envs' sequences per minibatch
        "update_epochs": 2,
        "learning_rate": 1e-3,
        "total_timesteps": 16 * 4 * 6,
        "gif_interval": 0,
        "seed": 3,
        "device": "cpu",
        "env_kwargs": {"max_episode_steps": 20},
        "checkpoint": {"interval": 2, "keep": 2},
    }
    raw.update(overrides)
    return config_from_dict(raw)


@pytest.mark.parametrize("options", [{}, {"norm_obs": True, "norm_reward": True, "target_kl": 0.5}])
def test_a_recurrent_run_resumes_bit_identically(tmp_path, options):
    from tests.test_checkpoint import UpdateCounter

    config = tiny_lstm_config(**options)
    straight = train(config, tmp_path / "straight")
    counter = UpdateCounter()
    train(config, tmp_path / "resumed", sinks=[counter], should_stop=lambda: counter.updates >= 3)
    resumed = train(config, tmp_path / "resumed", resume=True)
    assert resumed.status == "finished" and resumed.step == straight.step
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), name


def test_what_does_not_combine_with_ppo_lstm_is_refused_by_key():
    for algo in ("dqn", "sac", "impala", "appo"):
        with pytest.raises(ConfigError, match=f"ppo-lstm is a recurrent policy for algo ppo or a2c; algo {algo}"):
            config_from_dict({"algo": algo, "model_type": "ppo-lstm"})
    with pytest.raises(ConfigError, match="use_per"):
        tiny_lstm_config(use_per=True)
    with pytest.raises(ConfigError, match=r"num_envs \(6\) must be a multiple of num_minibatches \(4\)"):
        tiny_lstm_config(num_envs=6, mini_batch_size=None, num_minibatches=4)
    assert tiny_lstm_config(algo="a2c", update_epochs=1).model_type == "ppo-lstm"


def play_episode(env, act, steps=60):
    """Observations and actions of `steps` steps of a 2-env batch, with `act(obs, starts)`."""
    obs = env.reset(seed=2).numpy()
    starts = np.ones(2, dtype=bool)
    actions = []
    for _ in range(steps):
        action = act(obs, starts)
        actions.append(action)
        next_obs, _, terminated, truncated, _ = env.step(torch.as_tensor(action))
        obs, starts = next_obs.numpy(), (terminated | truncated).numpy()
    return np.stack(actions)


def test_onnx_plays_whole_episodes_as_torch_does(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="optional extra: pip install -r requirements-export.txt")
    pytest.importorskip("onnx", reason="optional extra")
    from trainer.serving.export import export_onnx

    env = make_vec_env("cartpole", 2, seed=2, max_episode_steps=25)
    spec, policy = lstm_policy(env, seed=5)
    with torch.no_grad():
        policy.actor.weight.mul_(300.0)  # decisive actions: a different state would show
    model = TrainedModel(policy.eval(), {"policy_spec": spec, "config": {"env_name": "cartpole"}}, torch.device("cpu"))
    path = export_onnx(model, tmp_path / "lstm.onnx", with_details=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "state_h", "state_c"]
    assert [o.name for o in session.get_outputs()][:3] == ["action", "state_h_out", "state_c_out"]

    torch_state = [None]
    onnx_state = [np.zeros((1, 2, policy.state_size), np.float32)] * 2

    def act_torch(obs, starts):
        action, torch_state[0] = policy.predict(obs, torch_state[0], starts, deterministic=True)
        return action

    def act_onnx(obs, starts):
        keep = (~starts).astype(np.float32)[None, :, None]  # the engine zeroes a new episode's state
        action, h, c, _, _ = session.run(
            None, {"obs": obs, "state_h": onnx_state[0] * keep, "state_c": onnx_state[1] * keep}
        )
        onnx_state[:] = [h, c]
        np.testing.assert_allclose(h, torch_state[0][0], atol=1e-5)  # the state it carries is torch's
        return action

    torch_actions = play_episode(env, act_torch)
    onnx_state[:] = [np.zeros((1, 2, policy.state_size), np.float32)] * 2
    torch_state[0] = None
    states = []

    def both(obs, starts):
        expected = act_torch(obs, starts)
        got = act_onnx(obs, starts)
        states.append(starts)
        np.testing.assert_array_equal(got, expected)
        return got

    np.testing.assert_array_equal(play_episode(env, both), torch_actions)
    assert np.stack(states)[1:].any()  # episodes ended (and restarted) along the way


def test_predict_returns_the_state_and_a_plain_model_passes_it_through():
    from trainer import PPO

    with PPO("cartpole", model_type="ppo-lstm", num_envs=4, num_steps=8, num_minibatches=1, gif_interval=0) as model:
        obs = np.full((3, 4), 0.5, np.float32)
        action, state = model.predict(obs, deterministic=True)
        assert action.shape == (3,) and [part.shape for part in state] == [(1, 3, 128), (1, 3, 128)]
        _, later = model.predict(obs, state=state, deterministic=True)
        assert not np.array_equal(later[0], state[0])  # the state moved on
        _, fresh = model.predict(obs, state=state, episode_start=[True, True, True], deterministic=True)
        np.testing.assert_array_equal(fresh[0], state[0])  # a new episode starts from zeros again
        single, one = model.predict(np.zeros(4, np.float32))
        with torch.no_grad():
            _, carried = model.policy.play(torch.full((3, 4), 0.5), deterministic=True)
        np.testing.assert_array_equal(carried[0:1].numpy(), state[0])  # play carries the state as predict
        assert np.ndim(single) == 0 and one[0].shape == (1, 1, 128)
    with PPO("cartpole", num_envs=4, num_steps=8, num_minibatches=1, gif_interval=0) as plain:
        marker = ("any", "state")
        action, state = plain.predict(np.zeros(4, np.float32), state=marker, episode_start=[True])
        assert state is marker and np.ndim(action) == 0
        assert plain.policy.play(torch.zeros(2, 4), state=marker)[1] is marker  # evaluation's and GIFs' form


def test_the_server_keeps_a_state_per_session_and_forgets_the_oldest():
    env = make_vec_env("cartpole", 1, seed=0)
    spec, policy = lstm_policy(env, seed=5)
    with torch.no_grad():
        policy.actor.weight.mul_(300.0)
    model = TrainedModel(policy.eval(), {"policy_spec": spec, "config": {"env_name": "cartpole"}}, torch.device("cpu"))
    rng = np.random.default_rng(0)
    games = {name: rng.standard_normal((12, 4)).astype(np.float32) for name in ("a", "b")}
    expected = {}
    for name, observations in games.items():
        state, actions = None, []
        for obs in observations:
            action, state = policy.predict(obs[None], state, deterministic=True)
            actions.append(int(action[0]))
        expected[name] = actions
    assert expected["a"] != [expected["a"][0]] * 12  # the answers depend on the history

    client = TestClient(create_app(model, max_sessions=2))
    got = {"a": [], "b": []}
    for step in range(12):  # interleaved: each session continues its own history
        for name in ("a", "b"):
            body = {"obs": games[name][step].tolist(), "session": name}
            got[name] += client.post("/v1/act", json=body).json()["actions"]
    assert got == expected
    refused = client.post("/v1/act", json={"obs": [0.0] * 4})
    assert refused.status_code == 422 and "session" in refused.json()["detail"]
    # A third session evicts the least recently used ("a"), which then starts over.
    client.post("/v1/act", json={"obs": [0.0] * 4, "session": "c"})
    first = client.post("/v1/act", json={"obs": games["a"][0].tolist(), "session": "a"}).json()["actions"]
    assert first == expected["a"][:1]
    restart = {"obs": games["b"][0].tolist(), "session": "b", "episode_start": True}
    assert client.post("/v1/act", json=restart).json()["actions"] == expected["b"][:1]


def lengths_played(env, act, episodes_per_env):
    """Each env's first `episodes_per_env` episode lengths, in the order they end, acting with
    `act(obs, starts)` (numpy in, numpy actions out)."""
    obs, starts = env.reset(seed=7).numpy(), np.ones(env.num_envs, dtype=bool)
    running, lengths, counts = np.zeros(env.num_envs, dtype=int), [], [0] * env.num_envs
    while min(counts) < episodes_per_env:
        obs, _, terminated, truncated, _ = env.step(torch.as_tensor(act(obs, starts)))
        obs, starts, running = obs.numpy(), (terminated | truncated).numpy(), running + 1
        for index in np.flatnonzero(starts):
            if counts[index] < episodes_per_env:
                counts[index] += 1
                lengths.append(int(running[index]))
            running[index] = 0
    return lengths


def test_evaluation_and_gifs_play_a_recurrent_policy_with_its_state(tmp_path):
    """Evaluation and the rollout GIF carry the state through each episode and reset it where the
    env resets (time limits included): their episodes are those of stepping predict by hand."""
    from trainer.run.gif import GifRecorder
    from trainer.serving.evaluate import evaluate

    env = make_vec_env("cartpole", 2, seed=7, max_episode_steps=30)
    spec, policy = lstm_policy(env, seed=5)
    with torch.no_grad():
        policy.actor.weight.mul_(300.0)  # decisive actions: a dropped state would show
    policy.eval()
    config = {"env_name": "cartpole", "env_kwargs": {"max_episode_steps": 30}}
    model = TrainedModel(policy, {"policy_spec": spec, "config": config}, torch.device("cpu"))
    carried = [None]

    def with_state(obs, starts):
        action, carried[0] = policy.predict(obs, carried[0], starts, deterministic=True)
        return action

    expected = lengths_played(env, with_state, 3)
    stateless = lengths_played(env, lambda obs, starts: policy.predict(obs, deterministic=True)[0], 3)
    assert expected != stateless and 30 in expected  # the state matters; a time limit cut an episode
    result = evaluate(model, episodes=6, num_envs=2, seed=7)
    assert result.lengths == expected

    one_env = make_vec_env("cartpole", 1, seed=7)  # no short time limit: the pole falls
    carried[0] = None
    first_episode = lengths_played(one_env, with_state, 1)
    assert first_episode != lengths_played(one_env, lambda obs, starts: policy.predict(obs)[0], 1)
    recorder = GifRecorder(lambda: make_vec_env("cartpole", 1, seed=7), spec, 100)
    gif = recorder.record(policy.state_dict(), tmp_path / "lstm.gif", seed=7)
    recorder.close()
    assert gif.episode_ended and [gif.episode_steps] == first_episode


def test_watch_plays_a_recurrent_run_with_its_state(tmp_path):
    """The studio's Watch player carries the state through each episode and resets it at the end."""
    from studio.watch import LivePlayer
    from trainer.run.checkpoint import atomic_save, load_model, read_checkpoint

    final = train(tiny_lstm_config(env_kwargs={}, total_timesteps=64), tmp_path / "run").final_model
    payload = read_checkpoint(final)
    _, untrained = lstm_policy(make_vec_env("cartpole", 1), seed=5)
    with torch.no_grad():
        untrained.actor.weight.mul_(300.0)  # decisive actions that depend on the history
    payload["policy_state"] = untrained.state_dict()
    atomic_save(payload, final)
    policy = load_model(final).policy
    carried = [None]

    def with_state(obs, starts):
        action, carried[0] = policy.predict(obs, carried[0], starts, deterministic=True)
        return action

    env = make_vec_env("cartpole", 1, seed=7)
    expected = lengths_played(env, with_state, 3)
    assert expected != lengths_played(env, lambda obs, starts: policy.predict(obs)[0], 3)
    player = LivePlayer(tmp_path / "run", seed=7)
    lengths, steps = [], 0
    while len(lengths) < 3:
        episode = player.step().episode
        steps += 1
        if player.episode != episode:
            lengths.append(steps)
            steps = 0
    player.close()
    assert lengths == expected


def learn_without_velocity(model_type, total_timesteps, **overrides):
    from trainer import PPO

    settings = {
        "model_type": model_type,
        "wrappers": NO_VELOCITY,
        "num_envs": 32,
        "num_steps": 16,
        "num_minibatches": 4,  # 8 envs' whole sequences per minibatch
        "update_epochs": 4,
        "learning_rate": 3e-3,
        "gamma": 0.98,
        "gae_lambda": 0.95,
        "ent_coef": 0.0,
        "norm_obs": True,
        "seed": 1,
        "gif_interval": 0,
        **overrides,
    }
    best = 0.0

    def track(event, model):
        nonlocal best
        best = max(best, event.get("recent_return_mean") or 0.0)

    start = time.perf_counter()
    with PPO("cartpole", **settings) as model:
        model.learn(total_timesteps, callback=track)
    print(f"{model_type}: best recent_return_mean {best:.0f} in {time.perf_counter() - start:.0f} s")
    return best


def test_the_lstm_learns_cartpole_without_velocities():
    assert learn_without_velocity("ppo-lstm", 64_000) >= 300  # 300 at 55k steps (seed 1)


@pytest.mark.slow
def test_without_velocities_the_lstm_passes_475_where_the_mlp_of_its_size_stays_below_200():
    longer = {"num_steps": 32, "learning_rate": 2e-3}  # configs/cartpole_lstm.yaml's: 475 at 195k steps
    assert learn_without_velocity("ppo-small", 250_000, **longer) < 200
    assert learn_without_velocity("ppo-lstm", 250_000, **longer) >= 475
