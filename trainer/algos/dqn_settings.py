"""DQN's own config keys, declared once (YAML, `--set`, the API's keywords, the studio's form),
and what its update returns. Torch-free: `import trainer` registers DQN with these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.algos.replay_settings import FEED_METRICS, ReplayKeys, check_replay
from trainer.config.checks import Boolean, Integer, Real
from trainer.config.keys import DQN, key

DQN_SUMMARY = (
    "deep Q-learning from a replay buffer: double Q, dueling heads, n-step, prioritised replay (Mnih et al. 2015)"
)
DQN_LEARNED_METRICS = ("value_loss", "q_value_mean", "td_error_mean")  # means over an update's gradient steps
DQN_METRICS = (*DQN_LEARNED_METRICS, "buffer_size", "gradient_steps", "epsilon", *FEED_METRICS)


@dataclass(frozen=True)
class DQNKeys(ReplayKeys):
    target_update_interval: int = key(
        500,
        "Env steps (all envs) between hard copies of the Q-network into the target (`tau` 1).",
        Integer(minimum=1),
        DQN,
    )
    exploration_initial_eps: float = key(1.0, "Share of random actions at the start.", Real(0.0, 1.0), DQN)
    exploration_final_eps: float = key(0.05, "Share of random actions at the end of the decay.", Real(0.0, 1.0), DQN)
    exploration_fraction: float = key(
        0.5, "Share of the run over which epsilon decays linearly to its final value.", Real(0.0, 1.0), DQN
    )
    double_q: bool = key(
        True, "Double Q-learning: the online network picks the next action, the target scores it.", Boolean(), DQN
    )
    dueling: bool = key(False, "Dueling heads: Q = V + A - mean(A) (Wang et al. 2016).", Boolean(), DQN)


def epsilon_at(config: Any, step: int) -> float:
    """The share of random actions at env step `step` of the run (all envs): linear from
    `exploration_initial_eps` to `exploration_final_eps` over `exploration_fraction` of the run.
    Actors of an Ape-X run use it too, at the step of the weights they play (trainer/algos/replay_feed.py)."""
    decay_steps = config.exploration_fraction * config.total_timesteps
    progress = min(1.0, step / decay_steps) if decay_steps > 0 else 1.0
    start, end = config.exploration_initial_eps, config.exploration_final_eps
    return start + progress * (end - start)


def check_dqn(config: Any, given: set[str], problems: list[str]) -> None:
    check_replay(config, given, problems, tau=1.0)
    if config.exploration_final_eps > config.exploration_initial_eps:
        problems.append(
            f"exploration_final_eps ({config.exploration_final_eps}) is above exploration_initial_eps "
            f"({config.exploration_initial_eps}): epsilon decays from the initial value to the final one"
        )
