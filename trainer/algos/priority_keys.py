"""The prioritised-sampling keys, declared once for every algorithm that reads them: PPO and A2C
(minibatches of a rollout, by advantage) and DQN and SAC (the replay buffer, by TD error). Each
function returns a fresh `key(...)` field, so that each algorithm's keys dataclass holds its own.
Torch-free (the studio builds its form from them).
"""

from __future__ import annotations

from typing import Any

from trainer.config.checks import Boolean, Real
from trainer.config.keys import NORMALISATION, key


def use_per() -> Any:
    return key(
        False,
        "Prioritised sampling (Schaul et al. 2016): ppo / a2c draw minibatches in proportion to "
        "abs(advantage)^`per_alpha`, dqn / sac draw replayed transitions in proportion to abs(TD error)^`per_alpha`; "
        "importance weights (`per_beta`) correct the bias.",
        Boolean(),
        NORMALISATION,
    )


def per_alpha() -> Any:
    return key(0.6, "How strongly `use_per` prefers large errors (0: uniform).", Real(0.0), NORMALISATION)


def per_beta() -> Any:
    return key(
        0.4,
        "Importance-sampling correction of `use_per` (1: full); dqn / sac anneal it to 1 over the run.",
        Real(0.0, 1.0),
        NORMALISATION,
    )
