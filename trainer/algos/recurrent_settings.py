"""What does not combine with a recurrent policy (`model_type: ppo-lstm`), refused at validation
with the key named. Torch-free: the registry hands it to the config's table with the built-in
algorithms' own checks (trainer/algos/registry.py).

PPO and A2C train it (trainer/algos/recurrent_ppo.py); DQN and SAC do not. Its minibatches are
whole sequences, so `num_envs` must split evenly into `num_minibatches`; prioritised minibatches
(`use_per`) draw single samples, and `hidden_sizes` shapes an MLP, so both are refused with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.nets.spec import RECURRENT_MODEL_TYPES

RECURRENT_ALGOS = ("ppo", "a2c")


def check_recurrent(config: Any, given: set[str], problems: list[str]) -> None:
    """The recurrent model_type's relations to the other keys (nothing for any other model_type)."""
    model_type = config.model_type
    if model_type not in RECURRENT_MODEL_TYPES:
        return
    if config.algo not in RECURRENT_ALGOS:
        problems.append(
            f"model_type {model_type} is a recurrent policy for algo {' or '.join(RECURRENT_ALGOS)}; algo "
            f"{config.algo} takes an MLP model_type (ppo-small, ppo-medium, ppo-large) or ppo-cnn"
        )
        return
    if config.use_per:
        problems.append(
            f"use_per draws single samples, but model_type {model_type} learns from whole sequences; "
            f"remove use_per (or use an MLP model_type)"
        )
    if config.hidden_sizes:
        problems.append(
            f"hidden_sizes sets the layers of an MLP policy; model_type {model_type} has its own "
            f"(Linear 64, LSTM 64). Remove hidden_sizes or use an MLP model_type"
        )
    minibatches = config.num_minibatches
    if minibatches and config.num_envs % minibatches:
        problems.append(
            f"model_type {model_type} learns from minibatches of whole envs' sequences, so num_envs "
            f"({config.num_envs}) must be a multiple of num_minibatches ({minibatches}); "
            f"set num_minibatches (or mini_batch_size = num_steps x envs per minibatch) to fit"
        )


def with_recurrent_check(check: Callable[..., None] | None) -> Callable[..., None]:
    """An algorithm's own check, then `check_recurrent`."""

    def checked(config: Any, given: set[str], problems: list[str]) -> None:
        if check is not None:
            check(config, given, problems)
        check_recurrent(config, given, problems)

    return checked
