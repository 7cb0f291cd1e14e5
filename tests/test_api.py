"""The Python API (trainer/api.py): PPO("cartpole").learn(...) learns, continues, saves, loads,
plays; Gymnasium factories train; callbacks stop; nothing is written without a run_dir; bad
keywords name the key. Also train() validating a hand-built TrainConfig."""

import os

import gymnasium
import numpy as np
import pytest
import torch

from trainer import A2C, PPO, ConfigError, TrainConfig, load_model, train

LEARN_STEPS = 122_880  # 30 updates of the shipped CartPole config (128 envs x 32 steps)


def _files_under(folder) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(root, name), folder) for root, _, names in os.walk(folder) for name in names
    )


@pytest.fixture(scope="module")
def trained():
    """One CartPole model trained in memory, shared by the tests below (a few seconds)."""
    model = PPO("cartpole", seed=3, device="cpu")
    returns = []
    model.learn(total_timesteps=LEARN_STEPS, callback=lambda metrics, _: returns.append(metrics["recent_return_mean"]))
    yield model, returns
    model.close()


def test_ppo_learns_cartpole_from_the_shipped_config(trained):
    model, returns = trained
    assert model.config.learning_rate == 4e-3 and model.config.num_envs == 128  # configs/cartpole.yaml
    assert model.num_timesteps == LEARN_STEPS
    assert returns[-1] > 150, returns[-5:]  # random play: about 22; the 12 seeds tried reach 155-500


def test_learn_again_continues_where_it_stopped(trained):
    model, returns = trained
    before, update_before = model.num_timesteps, model.last_metrics["update"]
    more = []
    model.learn(total_timesteps=20_000, callback=lambda metrics, _: more.append(metrics))
    assert model.num_timesteps == before + 5 * 4096  # 20_000 rounded up to whole updates
    assert [m["update"] for m in more] == list(range(update_before + 1, update_before + 6))
    assert more[0]["episodes"] > 0 and more[-1]["recent_return_mean"] > 0.5 * returns[-1]


def test_save_load_predict_round_trip(trained, tmp_path):
    model, _ = trained
    path = model.save(tmp_path / "cartpole.pth")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32) * 0.5
    actions, state = model.predict(obs, deterministic=True)
    assert state is None and actions.shape == (64,)
    with PPO.load(path) as loaded:
        assert loaded.num_timesteps == model.num_timesteps
        assert np.array_equal(loaded.predict(obs, deterministic=True)[0], actions)
        one, _ = loaded.predict(obs[0], deterministic=True)
        assert one == actions[0]
    assert np.array_equal(load_model(path).predict(obs, deterministic=True)[0], actions)
    raw = torch.load(path, weights_only=True)  # plain tensors and values only
    assert raw["format"] == "rl-studio" and raw["config"]["env_name"] == "cartpole"


def test_a_loaded_model_continues_training_exactly(trained, tmp_path):
    model, _ = trained
    path = model.save(tmp_path / "exact.pth")
    with PPO.load(path) as first, PPO.load(path) as second:
        first.learn(total_timesteps=4096)
        second.learn(total_timesteps=4096)
        for name, tensor in first.policy.state_dict().items():
            assert torch.equal(tensor, second.policy.state_dict()[name]), name


def test_a_gymnasium_env_factory_trains():
    with PPO(lambda: gymnasium.make("CartPole-v1"), num_envs=4, num_steps=64, seed=1, device="cpu") as model:
        seen = []
        model.learn(total_timesteps=1024, callback=lambda metrics, _: seen.append(metrics))
        assert model.num_timesteps == 1024 and len(seen) == 4
        assert sum(m["episodes_this_update"] for m in seen) > 0
        assert model.config.env_name == "CartPole-v1"  # what the saved model says it played
        assert model.predict(np.zeros(4, dtype=np.float32), deterministic=True)[0] in (0, 1)


def test_an_env_factory_with_workers_runs_in_the_pool_and_trains_the_same():
    """num_workers > 1 sends the factory (a lambda: cloudpickle) to worker processes; the pool
    changes where the envs step, not what they do, so the weights match the in-process run."""

    def make():
        return gymnasium.make("CartPole-v1")

    settings = dict(num_envs=4, num_steps=32, seed=2, device="cpu")
    with PPO(lambda: make(), num_workers=2, **settings) as pooled, PPO(make, **settings) as in_process:
        assert pooled.env.mode == "pool" and pooled.env.num_workers == 2 and len(pooled.env._pool.pids) == 2
        assert "vectorisation pool" in pooled.env.vectorization and in_process.env.mode == "sync"
        pooled.learn(total_timesteps=256)
        in_process.learn(total_timesteps=256)
        for name, tensor in pooled.policy.state_dict().items():
            assert torch.equal(tensor, in_process.policy.state_dict()[name]), name


def test_an_env_factory_that_cannot_be_pickled_names_the_fix():
    import threading

    lock = threading.Lock()  # a closure over a lock cannot travel to another process

    def make():
        with lock:
            return gymnasium.make("CartPole-v1")

    with pytest.raises(ValueError, match="cannot be sent to the pool's worker processes.*num_workers: 1"):
        PPO(make, num_envs=4, num_workers=2, device="cpu")
    with PPO(make, num_envs=4, device="cpu") as model:  # in this process it needs no pickling
        model.learn(total_timesteps=256)


def test_a_callback_returning_false_stops_training():
    with PPO("cartpole", num_envs=16, num_steps=16, seed=1, device="cpu") as model:
        model.learn(total_timesteps=100 * 256, callback=[lambda m, _: None, lambda m, _: m["update"] < 2])
        assert model.num_timesteps == 2 * 256


def test_a_failing_callback_is_raised_by_learn():
    def broken(metrics, model):
        raise ValueError("callback bug")

    with PPO("cartpole", num_envs=16, num_steps=16, device="cpu") as model:
        with pytest.raises(ValueError, match="callback bug"):
            model.learn(total_timesteps=10 * 256, callback=broken)
        assert model.num_timesteps == 256


def test_without_run_dir_nothing_is_written(tmp_path, monkeypatch):
    import tempfile

    work, temporary = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    temporary.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    with PPO("cartpole", num_envs=16, num_steps=16, gif_interval=1, tensorboard=True, device="cpu") as model:
        model.learn(total_timesteps=4 * 256)
        model.predict(np.zeros(4, dtype=np.float32))
    assert _files_under(work) == [] and _files_under(temporary) == []


def test_with_run_dir_the_usual_run_folder_is_written(tmp_path):
    run_dir = tmp_path / "run"
    with PPO("cartpole", run_dir=run_dir, num_envs=16, num_steps=16, gif_interval=0, device="cpu") as model:
        model.learn(total_timesteps=2 * 256)
        model.learn(total_timesteps=256)
    files = _files_under(run_dir)
    assert {"config.yaml", "metrics.jsonl", "train.log", "cartpole_ppo_final.pth"} <= set(files)
    assert load_model(run_dir / "cartpole_ppo_final.pth").global_step == 3 * 256


def test_bad_keywords_name_the_key():
    with pytest.raises(ConfigError, match="learning_rat.*Did you mean 'learning_rate'"):
        PPO("cartpole", learning_rat=1e-3)
    with pytest.raises(ConfigError, match="num_envs"):
        PPO("cartpole", num_envs=-4)
    with pytest.raises(ConfigError, match="hidden_sizes must be a list"):
        PPO("cartpole", net_arch=[0, 64])
    with pytest.raises(ConfigError, match="A2C"):
        PPO("cartpole", algo="a2c")


def test_any_hidden_sizes_build_train_save_and_load(tmp_path):
    with PPO("cartpole", net_arch=[32, 16], num_envs=8, num_steps=16, device="cpu") as model:
        assert model.config.hidden_sizes == [32, 16]
        assert [layer.out_features for layer in model.policy.actor if hasattr(layer, "out_features")] == [32, 16, 2]
        assert [layer.out_features for layer in model.policy.critic if hasattr(layer, "out_features")] == [32, 16, 1]
        model.learn(total_timesteps=256)
        path = model.save(tmp_path / "small.pth")
        obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
        expected, _ = model.predict(obs, deterministic=True)
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], expected)
    with pytest.raises(ConfigError, match="ppo-cnn has its own"):
        PPO("snake", hidden_sizes=[8], model_type="ppo-cnn", env_kwargs={"obs": "grid"})


def test_a2c_trains_and_is_loaded_as_a2c(tmp_path):
    with A2C("cartpole", num_envs=16, num_steps=16, device="cpu") as model:
        model.learn(total_timesteps=512)
        assert model.config.algo == "a2c" and model.num_timesteps == 512
        path = model.save(tmp_path / "a2c.pth")
    with pytest.raises(ConfigError, match="A2C.load"):
        PPO.load(path)
    with A2C.load(path) as loaded:
        assert loaded.config.update_epochs == 1


def test_every_registered_algorithm_has_a_class_and_model_load_picks_it(tmp_path):
    from trainer import DQN, SAC, api_class
    from trainer.api import Model

    assert api_class("ppo") is PPO and api_class("A2C") is A2C and api_class("dqn") is DQN and api_class("sac") is SAC
    with pytest.raises(
        ValueError, match="no algorithm 'ddpg' is registered here; the registered ones: ppo, a2c, dqn, sac"
    ):
        api_class("ddpg")
    with pytest.raises(TypeError, match="use PPO, A2C, DQN, SAC or api_class"):
        Model("cartpole")
    with A2C("cartpole", num_envs=8, num_steps=16, device="cpu") as model:
        path = model.save(tmp_path / "a2c.pth")
    with Model.load(path) as loaded:  # the file names its algorithm
        assert type(loaded) is A2C and loaded.config.algo == "a2c"


def test_train_validates_a_hand_built_train_config(tmp_path):
    with pytest.raises(ConfigError, match="num_envs"):
        train(TrainConfig(num_envs=-4), tmp_path / "bad")
    result = train(
        TrainConfig(env_name="snake", num_envs=8, num_steps=8, total_timesteps=128, gif_interval=0, device="cpu"),
        tmp_path / "snake",
    )
    assert result.status == "finished" and result.step == 128


def test_load_does_not_import_code_a_file_names(trained, tmp_path):
    model, _ = trained
    payload = torch.load(model.save(tmp_path / "model.pth"), weights_only=True)
    payload["config"]["env_name"] = "os:system"  # a file is data: it must not pick code to run
    torch.save(payload, tmp_path / "evil.pth")
    with pytest.raises(ConfigError, match="allow_custom_code"):
        PPO.load(tmp_path / "evil.pth")


def test_pip_install_gives_the_api_the_configs_and_the_commands_anywhere(tmp_path):
    """`pip install .` (non-editable, into a folder): the packages, configs/ and both commands."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("setuptools", minversion="70.1")  # builds wheels without the `wheel` package
    root = Path(__file__).resolve().parents[1]
    source, target, elsewhere = tmp_path / "source", tmp_path / "site", tmp_path / "elsewhere"
    source.mkdir()
    elsewhere.mkdir()
    for name in ("envs", "trainer", "studio", "configs"):  # a copy: the build leaves build/ behind
        shutil.copytree(root / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("app.py", "pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    check = (
        "import trainer, trainer.config.defaults as c; from trainer import PPO, load_model; "
        "print(trainer.__file__); print(c.shipped_config_path('FlappyBird-v0'))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", check], cwd=elsewhere, env=env, capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert shown == [str(target / "trainer" / "__init__.py"), str(target / "configs" / "flappy_bird.yaml")]
    for command in ("rl-train", "rl-studio"):
        completed = subprocess.run(
            [sys.executable, str(target / "bin" / command), "--help"],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert completed.returncode == 0 and "usage:" in completed.stdout, completed.stderr[-2000:]


def test_an_object_that_only_looks_like_a_vec_env_is_refused_with_what_to_do():
    """The rollout drives an env through VecEnv's declared methods (step_groups, send, recv): a
    look-alike is refused when the model is made, not with an AttributeError in the first rollout."""
    from envs.errors import EnvError

    class LookAlike:
        num_envs = 4
        single_observation_space = gymnasium.spaces.Box(-1, 1, (3,))
        single_action_space = gymnasium.spaces.Discrete(2)

        def step(self, actions):
            raise AssertionError("never stepped")

        def reset(self, seed=None):
            raise AssertionError("never reset")

    with pytest.raises(EnvError, match="not an envs.base.VecEnv: subclass VecEnv"):
        PPO(LookAlike())
