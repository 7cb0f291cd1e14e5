"""An algorithm, as the training loop sees it: what it is given, what it does each update, what it
saves, and which network plays.

The loop (trainer/run/loop.py, `TrainingSession`) owns the run: the env and its next
observations, the counters, events, checkpoint files, GIFs, stopping and the ranks. It builds the
algorithm once, `cls(setup)`, and per update calls, in this order:

    obs = algorithm.collect(obs, progress)   # step setup.env: experience into the algorithm's own storage
    metrics = algorithm.update(progress)     # learn from it: {metric name: value}, names from metric_names

A checkpoint holds `algorithm.policy`'s weights (with the config's `algo`) and
`algorithm.state_dict()`; resuming builds the algorithm the config names and hands that state
back to `load_state_dict`.

PPO and A2C (trainer/algos/ppo.py) collect a rollout and update on it. An off-policy algorithm
(DQN, SAC) steps the env a few times per `collect` into its replay buffer and samples minibatches
from it in `update`, on its own schedule (`progress`), keeping buffer, target networks and
schedules in its state_dict. An asynchronous learner can let `collect` hand the policy's weights
to actors and take what they gathered.

To add one: subclass `Algorithm` in a file of its own, then `register("name", cls)`
(trainer/algos/registry.py). Its keys appear in YAML, `--set`, the API's keywords and the
studio's form (only when it is chosen); `trainer.api.api_class("name")` trains it from Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from trainer.algos.experience import ExperienceSource
    from trainer.config.keys import TrainConfig


def _on_one_process(tensor: Tensor) -> None:
    """A reduction over ranks when there is one rank: nothing to do."""


@dataclass
class Setup:
    """What the loop hands an algorithm when it builds it."""

    config: TrainConfig  # validated; the algorithm's own keys read as config.<key>
    env: Any  # the VecEnv to collect from (envs/base.py), on `device`
    device: torch.device
    policy_spec: dict  # what `build_policy` makes the playing network from
    generator: torch.Generator  # the run's sampling stream (actions, minibatches); the loop saves it
    reduce_mean: Callable[[Tensor], None] | None = None  # average over ranks in place (gradients); None: one rank
    reduce_sum: Callable[[Tensor], None] = _on_one_process  # sum over ranks in place (statistics)
    broadcast: Callable[[nn.Module], None] | None = None  # rank 0's weights into this rank's module
    log: Callable[[str], None] = print  # a line in the run's log (the loop's: train.log, the studio)
    experience: ExperienceSource | None = None  # actors' batches (an actor-learner run); None: collect from env


@dataclass(frozen=True)
class Progress:
    """Where the run is, for the update about to run (an algorithm's own schedules read it)."""

    update: int  # 1-based number of this update
    num_updates: int  # updates planned (grows when the API's learn() is called again)
    global_step: int  # env steps before this update, all ranks
    learning_rate: float  # this update's (`lr_scaling`, `anneal_lr` applied)


class Algorithm:
    """The interface every algorithm implements; the loop calls nothing else.

    Set in `__init__`: `policy`, the playing network, an `ActorCritic` built by
    `trainer.nets.policies.build_policy(setup.policy_spec)` (load_model, ONNX export and the
    policy server rebuild it from the file without the algorithm), and `steps_per_update`, the
    env steps (all envs of this rank) each `collect` takes.
    """

    summary: ClassVar[str] = ""  # one line: the `algo` key's help, the studio's menu
    keys: ClassVar[type | None] = None  # a dataclass of `key(...)` fields: its own config keys
    metric_names: ClassVar[tuple[str, ...]] = ()  # what `update` returns: `update` metrics of
    # trainer/config/metrics.py (checked when it registers)
    replay: ClassVar[bool] = False  # True: samples minibatches from a replay buffer (trainer/config/batching.py)
    actions: ClassVar[str | None] = None  # "discrete" / "continuous": the only kind it takes (None: both)

    policy: nn.Module
    steps_per_update: int

    def __init__(self, setup: Setup):
        self.setup = setup

    @staticmethod
    def check_config(config: TrainConfig, given: set[str], problems: list[str]) -> None:
        """Relations between its own keys, at validation: append a message per problem (may set defaults)."""

    def start(self, obs: Tensor) -> None:
        """The run's first observations, before the first `collect` (not called on resume)."""

    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        """Step `setup.env` from `obs` for `steps_per_update` steps, keeping what it learns from;
        return the observations the next collect starts from."""
        raise NotImplementedError

    def update(self, progress: Progress) -> dict[str, Any]:
        """Learn from what was collected; return {name: value} for names in `metric_names`."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Everything it owns but `policy` (optimiser, other networks, buffers, schedules), as tensors
        and plain values (checkpoints load with weights_only=True), for an exact resume."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Take back what `state_dict` returned (on the setup's device)."""
