"""Batch vocabulary, one rule: which of num_steps / batch_size / mini_batch_size / num_minibatches
are derived from which, and the messages when they do not fit together.

    batch_size       samples collected per update  = num_envs x num_steps
    mini_batch_size  samples per gradient step; an update makes
                     update_epochs x (batch_size / mini_batch_size) gradient steps

An algorithm that learns from a replay buffer (DQN, SAC: `replay=True`) samples mini_batch_size
transitions from everything stored, so its mini_batch_size is free of batch_size, and num_steps
(SB3's `train_freq`: steps from every env between updates) defaults to 1.
"""

from __future__ import annotations

from typing import Any

DEFAULT_NUM_STEPS = 128
DEFAULT_MINI_BATCH_SIZE = 256
DEFAULT_REPLAY_NUM_STEPS = 1


def _divisors_near(number: int, target: int) -> list[int]:
    """The divisors of `number` just below and just above `target` (found by trial division up to
    sqrt(number), so a huge batch cannot stall the caller)."""
    divisors: set[int] = set()
    candidate = 1
    while candidate * candidate <= number and candidate <= 10**6:
        if number % candidate == 0:
            divisors.update((candidate, number // candidate))
        candidate += 1
    ordered = sorted(divisors)
    below = [d for d in ordered if d < target]
    above = [d for d in ordered if d > target]
    return below[-1:] + above[:1]


def _largest_divisor_up_to(number: int, limit: int) -> int:
    return next(d for d in range(min(limit, number), 0, -1) if number % d == 0)


def resolve_batch_sizes(config: Any, problems: list[str], replay: bool = False) -> None:
    """Fill num_steps / batch_size / mini_batch_size / num_minibatches of a TrainConfig from whichever
    were given, or append what does not fit together to `problems`. replay: the algorithm samples
    its minibatches from a replay buffer (see above)."""
    num_envs = config.num_envs
    if config.num_steps is not None and config.batch_size is not None:
        if config.num_steps * num_envs != config.batch_size:
            problems.append(
                f"batch_size ({config.batch_size}) must equal num_envs x num_steps "
                f"({num_envs} x {config.num_steps} = {num_envs * config.num_steps}). "
                f"batch_size is the number of samples per update; give only one of num_steps and "
                f"batch_size (the other is derived), or make them agree"
            )
            return
    elif config.batch_size is not None:
        if config.batch_size % num_envs:
            lower = max(num_envs, config.batch_size // num_envs * num_envs)
            problems.append(
                f"batch_size ({config.batch_size}) must be a multiple of num_envs ({num_envs}): each update "
                f"collects num_steps steps from every env. Use batch_size {lower} or {lower + num_envs}, "
                f"or set num_steps instead"
            )
            return
        config.num_steps = config.batch_size // num_envs
    else:
        if config.num_steps is None:
            config.num_steps = DEFAULT_REPLAY_NUM_STEPS if replay else DEFAULT_NUM_STEPS
        config.batch_size = config.num_steps * num_envs
    batch_size = config.batch_size
    if replay:
        if config.num_minibatches is not None:
            problems.append(
                f"num_minibatches splits one rollout, but algo {config.algo} samples mini_batch_size transitions "
                f"from its replay buffer for each gradient step: remove num_minibatches and set mini_batch_size"
            )
        if config.mini_batch_size is None:
            config.mini_batch_size = DEFAULT_MINI_BATCH_SIZE
        return
    if config.mini_batch_size is not None and config.num_minibatches is not None:
        if config.mini_batch_size * config.num_minibatches != batch_size:
            problems.append(
                f"mini_batch_size ({config.mini_batch_size}) x num_minibatches ({config.num_minibatches}) must "
                f"equal batch_size ({batch_size}); give only one of mini_batch_size and num_minibatches"
            )
            return
    elif config.num_minibatches is not None:
        if config.num_minibatches > batch_size or batch_size % config.num_minibatches:
            choices = _divisors_near(batch_size, config.num_minibatches)
            problems.append(
                f"num_minibatches ({config.num_minibatches}) must divide batch_size ({batch_size}) evenly; "
                f"values that do: {', '.join(map(str, choices))}"
            )
            return
        config.mini_batch_size = batch_size // config.num_minibatches
    elif config.mini_batch_size is None:  # an algorithm's check may choose another (a2c: the whole batch)
        config.mini_batch_size = _largest_divisor_up_to(batch_size, DEFAULT_MINI_BATCH_SIZE)
    mini = config.mini_batch_size
    if mini > batch_size:
        problems.append(
            f"mini_batch_size ({mini}) is larger than batch_size ({batch_size} = num_envs {num_envs} x "
            f"num_steps {config.num_steps}); mini_batch_size is the samples per gradient step, taken from "
            f"the batch of one update. Lower mini_batch_size or raise num_envs / num_steps"
        )
        return
    if batch_size % mini:
        choices = _divisors_near(batch_size, mini)
        problems.append(
            f"mini_batch_size ({mini}) must divide batch_size ({batch_size} = num_envs {num_envs} x num_steps "
            f"{config.num_steps}) evenly; nearby values that do: {', '.join(map(str, choices))}"
        )
        return
    config.num_minibatches = batch_size // mini
