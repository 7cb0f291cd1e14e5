"""The keys of every algorithm that learns from a replay buffer (DQN, SAC), declared once, and
the checks of their relations. Torch-free (the studio builds its form from them).

How a replay algorithm's update is counted: each update collects `num_steps` steps (SB3's
`train_freq`) from every env into the buffer, then makes `gradient_steps` gradient steps on
minibatches of `mini_batch_size` transitions sampled from it (none before `learning_starts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from trainer.algos import priority_keys
from trainer.algos.impala_settings import SOURCE_METRICS, ImpalaKeys
from trainer.config.checks import Boolean, Integer, Real
from trainer.config.keys import REPLAY, key

# What the update of a replay algorithm returns besides its own (trainer/config/metrics.py names)
REPLAY_METRICS = ("q_value_mean", "td_error_mean", "buffer_size", "gradient_steps")
# Fed by actors (Ape-X, trainer/algos/replay_feed.py): the lag of the batch written before the
# update and the experience source's numbers; null without actors. "queue_depth" among an
# algorithm's metrics is what makes `python -m trainer master` run it with actors.
FEED_METRICS = ("policy_lag", *SOURCE_METRICS)


def _shared_key(name: str) -> Any:
    """IMPALA's declaration of the key `name`, shared as it is (a key is declared once)."""
    declared = next(item for item in fields(ImpalaKeys) if item.name == name)
    return field(default=declared.default, metadata=declared.metadata)


@dataclass(frozen=True)
class ReplayKeys:
    buffer_size: int = key(
        100_000,
        "Transitions the replay buffer holds (all envs); the oldest are overwritten.",
        Integer(minimum=1, maximum=2**31),
        REPLAY,
    )
    learning_starts: int = key(
        1_000, "Env steps (all envs) collected before the first gradient step.", Integer(minimum=0), REPLAY
    )
    gradient_steps: int = key(
        1, "Gradient steps per update (each on `mini_batch_size` replayed transitions).", Integer(1, 10_000), REPLAY
    )
    tau: float | None = key(
        None,
        "Target network update: 1 copies the weights (dqn: every `target_update_interval` steps), "
        "less than 1 is Polyak averaging after every gradient step (null: dqn 1, sac 0.005).",
        Real(0.0, 1.0, low_open=True, optional=True),
        REPLAY,
    )
    n_step: int = key(1, "Steps of reward summed before bootstrapping (n-step returns).", Integer(1, 100), REPLAY)
    save_buffer: bool = key(
        True,
        "Save the replay buffer in checkpoints, so that a resume is exact (false: smaller files; a resume "
        "then starts with an empty buffer and says so).",
        Boolean(),
        REPLAY,
    )
    use_per: bool = priority_keys.use_per()
    per_alpha: float = priority_keys.per_alpha()
    per_beta: float = priority_keys.per_beta()
    weights_every: int = _shared_key("weights_every")


def check_replay(config: Any, given: set[str], problems: list[str], tau: float) -> None:
    """`tau` null takes the algorithm's default; the buffer must hold whole n-step windows of every env
    and at least one minibatch."""
    if config.tau is None:
        config.tau = tau
    if config.ranks_per_node() > 1 or config.max_nodes > 1:
        problems.append(
            f"algo {config.algo} learns in one process from one replay buffer, but nproc_per_node is "
            f"{config.nproc_per_node}, gpu_ids {config.gpu_ids} and max_nodes {config.max_nodes}: use one "
            f"process (nproc_per_node 1, at most one GPU in gpu_ids, max_nodes 1) and feed it from several "
            f"processes or machines with actors instead (`python -m trainer master --config ... --actors N`, "
            f"docs/cluster.md), or use algo ppo for data-parallel training"
        )
    for name in ("norm_obs", "norm_reward"):
        if getattr(config, name):
            problems.append(
                f"{name} normalises with running statistics that move while the replay buffer keeps old samples, "
                f"so algo {config.algo} does not take it: set {name}: false (or use algo ppo)"
            )
    rows = config.buffer_size // config.num_envs
    if rows < config.n_step + 1:
        problems.append(
            f"buffer_size ({config.buffer_size}) holds {rows} steps of each of the {config.num_envs} envs, fewer "
            f"than n_step + 1 ({config.n_step + 1}); raise buffer_size to at least "
            f"{(config.n_step + 1) * config.num_envs} or lower num_envs"
        )
    if config.mini_batch_size > config.buffer_size:
        problems.append(
            f"mini_batch_size ({config.mini_batch_size}) is larger than buffer_size ({config.buffer_size}): a "
            f"minibatch is sampled from the buffer; lower mini_batch_size or raise buffer_size"
        )
