"""SAC's own config keys, declared once, and what its update returns. Torch-free: `import trainer`
registers SAC with these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.algos.replay_settings import FEED_METRICS, REPLAY_METRICS, ReplayKeys, check_replay
from trainer.config.checks import Boolean, Integer, Real
from trainer.config.keys import SAC, key

SAC_SUMMARY = (
    "soft actor-critic for continuous actions: twin Q, target networks, automatic entropy tuning (Haarnoja et al. 2018)"
)
SAC_METRICS = ("policy_loss", "value_loss", "entropy", "alpha", *REPLAY_METRICS, *FEED_METRICS)


@dataclass(frozen=True)
class SACKeys(ReplayKeys):
    policy_frequency: int = key(
        2, "Gradient steps of the critics per actor step (delayed policy updates, as CleanRL).", Integer(1, 1000), SAC
    )
    autotune: bool = key(
        True, "Tune the entropy coefficient alpha towards `target_entropy` (else keep `alpha`).", Boolean(), SAC
    )
    alpha: float = key(0.2, "The entropy coefficient (its start value when `autotune`).", Real(0.0), SAC)
    target_entropy: float | None = key(
        None,
        "What `autotune` holds the policy's entropy at (null: minus the action dimensions).",
        Real(None, None, optional=True),
        SAC,
    )


def check_sac(config: Any, given: set[str], problems: list[str]) -> None:
    """SAC averages its target networks (`tau` 0.005 unless given, as CleanRL and SB3)."""
    check_replay(config, given, problems, tau=0.005)
    if config.autotune and config.alpha <= 0.0:
        problems.append(
            "alpha is 0 with autotune: true, but autotune scales alpha by factors (log alpha is learned), "
            "so it would stay 0; start it above 0 (e.g. alpha: 0.2), or set autotune: false to keep alpha 0"
        )
