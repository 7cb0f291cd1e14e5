"""RL Studio's training engine: PPO / A2C / DQN / SAC (or any registered algorithm) on batched environments,
headless or in the studio.

    from trainer import PPO
    model = PPO("cartpole", num_envs=64).learn(total_timesteps=200_000)
    model.save("cartpole.pth")

    from trainer import load_model
    model = load_model("runs/<run>/cartpole_ppo_final.pth")
    action, _ = model.predict(obs, deterministic=True)

    from trainer import load_config, train
    result = train(load_config("configs/cartpole.yaml"), "runs/my-run")

`import trainer` registers the built-in algorithms (their names and config keys, no torch:
trainer/algos/registry.py), so that every entry point validates configs with them; everything
else is imported when a name is used.
"""

from __future__ import annotations

from trainer.algos import registry as _registry  # noqa: F401 (registers ppo, a2c, dqn, sac)

__all__ = [
    "PPO",
    "A2C",
    "DQN",
    "SAC",
    "api_class",
    "load_model",
    "load_config",
    "train",
    "TrainConfig",
    "ConfigError",
    "CheckpointError",
]

_LOCATIONS = {
    "PPO": "trainer.api",
    "A2C": "trainer.api",
    "DQN": "trainer.api",
    "SAC": "trainer.api",
    "api_class": "trainer.api",
    "load_model": "trainer.run.checkpoint",
    "CheckpointError": "trainer.run.checkpoint",
    "load_config": "trainer.config.defaults",
    "TrainConfig": "trainer.config.keys",
    "ConfigError": "trainer.config.checks",
    "train": "trainer.run.loop",
}


def __getattr__(name: str):
    if name in _LOCATIONS:
        import importlib

        return getattr(importlib.import_module(_LOCATIONS[name]), name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
