"""Config loading and validation: the errors a person sees, and the YAML people copy from guides."""

from pathlib import Path

import pytest
import torch

from trainer.config.checks import ConfigError
from trainer.config.defaults import load_config
from trainer.config.keys import TrainConfig
from trainer.config.reference import config_reference
from trainer.config.validation import config_from_dict

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def error_of(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    return str(info.value)


def test_defaults_are_complete_and_valid():
    config = load_config()
    assert config.device == "auto"
    assert config.batch_size == config.num_envs * config.num_steps
    assert config.batch_size % config.mini_batch_size == 0
    assert config.num_minibatches == config.batch_size // config.mini_batch_size


def test_guide_yaml_underscored_numbers_and_exponents(tmp_path):
    path = write(tmp_path, "total_timesteps: 2_000_000\nlearning_rate: 1e-3\nent_coef: 1.0e-2\nnum_envs: 8\n")
    config = load_config(path)
    assert config.total_timesteps == 2_000_000
    assert config.learning_rate == pytest.approx(1e-3)  # PyYAML reads `1e-3` as a string
    assert config.ent_coef == pytest.approx(0.01)


def test_max_steps_is_an_alias_of_total_timesteps(tmp_path):
    assert load_config(write(tmp_path, "max_steps: 5000\n")).total_timesteps == 5000
    message = error_of({"max_steps": 10, "total_timesteps": 20})
    assert "max_steps" in message and "total_timesteps" in message


def test_shipped_guide_config_loads():
    config = load_config(ROOT / "configs" / "train_flappy_bird.yaml")
    assert (config.model_type, config.num_envs, config.seed, config.total_timesteps, config.update_epochs) == (
        "ppo-small",
        64,
        42,
        2_000_000,
        4,
    )
    assert config.vector_env is True and config.num_workers == 8


# Every file in configs/: the built-in games' tuned configs, the guide's file, the cluster guide's.
SHIPPED_CONFIGS = [
    "cartpole.yaml",
    "cartpole_dqn.yaml",
    "cartpole_lstm.yaml",
    "cluster.yaml",
    "flappy_bird.yaml",
    "flappy_bird_1000.yaml",
    "flappy_bird_dqn.yaml",
    "lunar_lander_continuous_ppo.yaml",
    "lunar_lander_continuous_sac.yaml",
    "lunar_lander_dqn.yaml",
    "lunar_lander_ppo.yaml",
    "pendulum_sac.yaml",
    "snake.yaml",
    "snake_10x10.yaml",
    "train_flappy_bird.yaml",
]


def test_the_shipped_configs_are_the_listed_ones_and_every_game_has_its_tuned_config():
    from envs import builtin_env_names
    from trainer.config.defaults import CONFIGS_DIR, shipped_config_path

    assert CONFIGS_DIR == ROOT / "configs"
    assert sorted(path.name for path in CONFIGS_DIR.glob("*.yaml")) == SHIPPED_CONFIGS, (
        "a config was added to or removed from configs/: list it in SHIPPED_CONFIGS, so that it is loaded below"
    )
    for game in builtin_env_names():
        assert shipped_config_path(game) == CONFIGS_DIR / f"{game}.yaml", f"{game} has no tuned config"


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_every_shipped_config_loads_and_validates(name):
    """The way its command reads it: `python -m trainer --config` (load_config), or for the cluster
    file `python -m trainer master --config` (its master / workers / communication sections split
    off first). A missing file or a key that does not validate is a failure, never a skip."""
    from trainer.cluster.nodes import split_cluster_file
    from trainer.config.loading import read_yaml_mapping

    path = ROOT / "configs" / name
    if name == "cluster.yaml":
        settings, cluster = split_cluster_file(read_yaml_mapping(path))
        assert (cluster.host, cluster.port) == ("192.168.1.100", 54321)
        assert cluster.workers == ["192.168.1.101", "192.168.1.102"]
        config = config_from_dict(settings)
    else:
        config = load_config(path)
    assert isinstance(config, TrainConfig)
    assert config.batch_size == config.num_envs * config.num_steps
    if "buffer_size" not in config.algo_settings:  # a replay algorithm samples from everything stored
        assert config.batch_size % config.mini_batch_size == 0
    stem = path.stem.removeprefix("train_")
    if stem in ("cartpole", "flappy_bird", "snake"):  # a game's own file names that game
        from envs import resolve_env_name

        assert resolve_env_name(config.env_name) == stem


def test_overrides_with_dotted_keys():
    config = load_config(None, ["learning_rate=3e-4", "checkpoint.interval=7", "num_envs=16", "gpu_ids=0,1"])
    assert config.learning_rate == pytest.approx(3e-4)
    assert config.checkpoint.interval == 7
    assert config.num_envs == 16
    assert config.gpu_ids == [0, 1]


def test_unknown_key_names_the_closest_valid_key():
    message = error_of({"learnig_rate": 0.001})
    assert "learnig_rate" in message and "did you mean 'learning_rate'" in message.lower()
    message = error_of({"checkpoint": {"intervall": 5}})
    assert "checkpoint.interval" in message


def test_wrong_type_and_range_name_key_value_and_rule():
    message = error_of({"num_envs": -4})
    assert "num_envs" in message and "-4" in message and "positive integer" in message
    message = error_of({"gamma": 1.5})
    assert "gamma" in message and "1.5" in message and "[0.0, 1.0]" in message
    message = error_of({"learning_rate": "fast"})
    assert "learning_rate" in message and "'fast'" in message and "number" in message


def test_several_problems_are_listed_together():
    message = error_of({"num_envs": 0, "gamma": 7, "algo": "dqm"})
    assert "3 problems" in message and "num_envs" in message and "gamma" in message and "algo" in message


def test_language_model_is_not_a_policy():
    message = error_of({"model_type": "qwen-7b"})
    assert "language model" in message
    for model_type in ("ppo-small", "ppo-medium", "ppo-large", "ppo-cnn"):
        assert model_type in message


def test_unknown_model_type_suggests_closest():
    assert "ppo-small" in error_of({"model_type": "ppo-smal"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_gpu_suggests_auto():
    message = error_of({"device": "cuda"})
    assert "no usable CUDA GPU" in message and "auto" in message


def test_batch_size_must_match_num_envs_times_num_steps():
    message = error_of({"num_envs": 8, "num_steps": 16, "batch_size": 100})
    assert "num_envs x num_steps" in message and "8 x 16 = 128" in message


def test_batch_size_derives_num_steps_and_must_be_a_multiple_of_num_envs():
    config = config_from_dict({"num_envs": 8, "batch_size": 256})
    assert config.num_steps == 32
    message = error_of({"num_envs": 8, "batch_size": 100})
    assert "multiple of num_envs" in message and "96" in message and "104" in message


def test_mini_batch_size_must_divide_batch_size_and_fit_in_it():
    message = error_of({"num_envs": 8, "num_steps": 32, "mini_batch_size": 100})
    assert "must divide batch_size (256" in message and "64" in message and "128" in message
    message = error_of({"num_envs": 8, "num_steps": 32, "mini_batch_size": 512})
    assert "larger than batch_size" in message


def test_num_minibatches_is_accepted_cleanrl_style():
    config = config_from_dict({"num_envs": 8, "num_steps": 32, "num_minibatches": 4})
    assert config.mini_batch_size == 64


def test_a2c_is_single_epoch():
    config = config_from_dict({"algo": "a2c", "num_envs": 8, "num_steps": 5})
    assert config.update_epochs == 1 and config.mini_batch_size == 40
    assert "a2c" in error_of({"algo": "a2c", "update_epochs": 4})


def test_unknown_env_name_lists_names_and_closest():
    message = error_of({"env_name": "CartPol-v1"})
    assert "CartPole-v1" in message and "flappy_bird" in message


def test_bad_yaml_and_missing_file_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["learning_rate"])


def test_round_trip_through_dict_keeps_every_value():
    config = load_config(
        None, ["num_envs=16", "num_steps=8", "checkpoint.keep=5", "env_kwargs={max_episode_steps: 100}"]
    )
    again = config_from_dict(config.to_dict())
    assert again == config
    assert isinstance(again, TrainConfig)


def test_docs_config_reference_is_the_declarations_table():
    """docs/config.md carries the tables generated from trainer/config/keys.py and defaults.py (docs/build.py)."""
    from trainer.config.defaults import untuned_defaults_markdown
    from trainer.config.reference import reference_markdown

    page = (ROOT / "docs" / "config.md").read_text()
    assert reference_markdown() in page and untuned_defaults_markdown() in page, (
        "docs/config.md's config reference or untuned defaults are stale: run python docs/build.py"
    )
    assert all(f"`{key}`" in reference_markdown() for key, _, _ in config_reference())


def test_overrides_replace_values_derived_in_a_saved_config(tmp_path):
    saved = tmp_path / "config.yaml"
    from trainer.config.loading import to_yaml

    saved.write_text(to_yaml(load_config(None, ["num_envs=8", "num_steps=16", "mini_batch_size=32"])))
    config = load_config(saved, ["num_envs=16"])  # the saved batch_size (128) makes way
    assert (config.num_envs, config.num_steps, config.batch_size, config.num_minibatches) == (16, 16, 256, 8)
    config = load_config(saved, ["batch_size=64"])
    assert (config.num_steps, config.batch_size, config.num_minibatches) == (8, 64, 2)


def test_an_env_without_a_tuned_config_starts_from_the_defaults_of_its_kind_of_actions(tmp_path):
    from trainer.config.defaults import UNTUNED_DEFAULTS, defaults_source, shipped_config

    continuous = UNTUNED_DEFAULTS["continuous"]
    declared = TrainConfig()
    assert any(getattr(declared, name) != value for name, value in continuous.items())
    # Box actions (Pendulum-v1): the same settings from the CLI, a YAML file that leaves them out,
    # and the Python API / studio form (shipped_config).
    for config in (
        load_config(None, ["env_name=Pendulum-v1"]),
        load_config(write(tmp_path, "env_id: Pendulum-v1\ntotal_timesteps: 50000\n")),
        shipped_config("Pendulum-v1"),
    ):
        assert {name: getattr(config, name) for name in continuous} == continuous
    assert "continuous" in defaults_source("Pendulum-v1") and "no tuned config" in defaults_source("Pendulum-v1")
    # What the user gives wins, and a batch_size given replaces the table's num_steps.
    config = load_config(None, ["env_name=Pendulum-v1", "num_envs=16", "batch_size=2048", "gamma=0.99"])
    assert (config.num_envs, config.num_steps, config.gamma, config.norm_obs) == (16, 128, 0.99, True)
    # Discrete actions without a tuned config: exactly the declared defaults, as before.
    for name in ("Acrobot-v1", "gym:CartPole-v1"):
        assert load_config(None, [f"env_name={name}"]).to_dict() == config_from_dict({"env_name": name}).to_dict()
        assert shipped_config(name).to_dict() == config_from_dict({"env_name": name}).to_dict()
    # A built-in game keeps its tuned file.
    assert shipped_config("cartpole").to_dict() == load_config(ROOT / "configs" / "cartpole.yaml").to_dict()
    assert defaults_source("CartPole-v1") == "the tuned config configs/cartpole.yaml"


def test_the_api_gives_an_env_object_the_defaults_of_its_actions():
    import gymnasium

    from trainer import PPO
    from trainer.config.defaults import UNTUNED_DEFAULTS

    continuous = UNTUNED_DEFAULTS["continuous"]
    with PPO(lambda: gymnasium.make("Pendulum-v1"), device="cpu") as model:
        assert {name: getattr(model.config, name) for name in continuous} == continuous
    with PPO("Pendulum-v1", num_envs=2, device="cpu") as model:
        assert (model.config.num_envs, model.config.norm_reward) == (2, True)
    with PPO(lambda: gymnasium.make("Acrobot-v1"), device="cpu") as model:
        assert model.config.num_envs == TrainConfig.num_envs and not model.config.norm_obs
