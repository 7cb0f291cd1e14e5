"""The algorithms the trainer knows, by the name the `algo` key takes: one `register` call each.

    from trainer.algos.registry import register
    register("reinforce", Reinforce)          # a trainer.algos.base.Algorithm subclass

Registering feeds every user of the name: the `algo` key's choices and the algorithm's own keys
(trainer/config/validation.py validates with them; the studio's form shows them while it is chosen), the
metrics its update returns (checked against trainer/config/metrics.py's registry here),
the Python API (`trainer.api.api_class(name)`) and checkpoints (they record `algo`; resuming and
`Model.load` build the algorithm from it).

The built-in algorithms are registered at the bottom by "module:Class" path, with their keys
given here, so that reading their names and keys imports no torch (the studio's process never
does); `import trainer` imports this module, so every entry point knows them. An algorithm
registered elsewhere is known in the process that registered it, and in processes forked from
it after that.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainer.algos.dqn_settings import DQN_METRICS, DQN_SUMMARY, DQNKeys, check_dqn
from trainer.algos.impala_settings import (
    APPO_METRICS,
    APPO_SUMMARY,
    IMPALA_METRICS,
    IMPALA_SUMMARY,
    APPOKeys,
    ImpalaKeys,
    check_appo,
    check_impala,
)
from trainer.algos.ppo_settings import A2C_SUMMARY, PPO_METRICS, PPO_SUMMARY, PPOKeys, check_a2c
from trainer.algos.recurrent_settings import with_recurrent_check
from trainer.algos.sac_settings import SAC_METRICS, SAC_SUMMARY, SACKeys, check_sac
from trainer.config.algorithm_keys import forget_algorithm
from trainer.config.declaring import declare_algorithm
from trainer.config.metrics import check_update_metrics

if TYPE_CHECKING:
    from trainer.algos.base import Algorithm

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True)
class Registration:
    name: str
    target: type[Algorithm] | str  # the class, or "module:Class" imported on first use
    summary: str
    metric_names: tuple[str, ...] = ()  # what its update returns (trainer/config/metrics.py names)

    def load(self) -> type[Algorithm]:
        if not isinstance(self.target, str):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def class_name(self) -> str:
        """What the Python API calls it: the class's own name (`PPO`, `A2C`)."""
        return self.target.partition(":")[2] if isinstance(self.target, str) else self.target.__name__


ALGORITHMS: dict[str, Registration] = {}


def register(
    name: str,
    cls: type[Algorithm] | str,
    *,
    summary: str | None = None,
    keys: type | None = None,
    check: Callable[..., None] | None = None,
    metric_names: tuple[str, ...] | None = None,
    replay: bool | None = None,
    actions: str | None = None,
) -> None:
    """Make `cls` trainable as `algo: name`. For a class, summary, keys, check and metric_names
    default to its own `summary`, `keys`, `check_config`, `metric_names`, `replay` and `actions`; a "module:Class" path
    gives them here instead. The metric names must be `update` metrics of the registry."""
    from trainer.algos.base import Algorithm

    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"an algorithm's name is lower case letters, digits and _ (at most 40), got {name!r}")
    if not isinstance(cls, str):
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise TypeError(f"register({name!r}, ...) takes a subclass of trainer.algos.base.Algorithm, got {cls!r}")
        summary = summary if summary is not None else cls.summary
        keys = keys if keys is not None else cls.keys
        check = check if check is not None else cls.check_config
        metric_names = metric_names if metric_names is not None else cls.metric_names
        replay = replay if replay is not None else cls.replay
        actions = actions if actions is not None else cls.actions
    metric_names = check_update_metrics(name, metric_names or ())
    # The config's table (refuses a clashing key). An algorithm whose update reports the actors'
    # queue learns from actors (trainer/algos/impala_settings.py SOURCE_METRICS).
    declare_algorithm(name, summary or "", keys, check, bool(replay), actions, actors="queue_depth" in metric_names)
    ALGORITHMS[name] = Registration(name, cls, summary or "", metric_names)


def unregister(name: str) -> None:
    """Forget an algorithm (tests register their own and leave the process as they found it)."""
    ALGORITHMS.pop(name, None)
    forget_algorithm(name)


def registration(name: str) -> Registration:
    """The algorithm registered as `name`; ValueError lists the ones there are."""
    found = ALGORITHMS.get(str(name).strip().lower())
    if found is None:
        raise ValueError(
            f"no algorithm {str(name)[:80]!r} is registered here; the registered ones: "
            f"{', '.join(ALGORITHMS)} (register it with trainer.algos.registry.register before "
            f"training or loading it)"
        )
    return found


def algorithm_class(name: str) -> type[Algorithm]:
    """The class that trains `algo: name`."""
    return registration(name).load()


# with_recurrent_check: model_type ppo-lstm's relations (trainer/algos/recurrent_settings.py)
register(
    "ppo",
    "trainer.algos.ppo:PPO",
    summary=PPO_SUMMARY,
    keys=PPOKeys,
    check=with_recurrent_check(None),
    metric_names=PPO_METRICS,
)
register(
    "a2c",
    "trainer.algos.ppo:A2C",
    summary=A2C_SUMMARY,
    keys=PPOKeys,
    check=with_recurrent_check(check_a2c),
    metric_names=PPO_METRICS,
)
register(
    "dqn",
    "trainer.algos.dqn:DQN",
    summary=DQN_SUMMARY,
    keys=DQNKeys,
    check=with_recurrent_check(check_dqn),
    metric_names=DQN_METRICS,
    replay=True,
    actions="discrete",
)
register(
    "sac",
    "trainer.algos.sac:SAC",
    summary=SAC_SUMMARY,
    keys=SACKeys,
    check=with_recurrent_check(check_sac),
    metric_names=SAC_METRICS,
    replay=True,
    actions="continuous",
)
register(
    "impala",
    "trainer.algos.impala:IMPALA",
    summary=IMPALA_SUMMARY,
    keys=ImpalaKeys,
    check=with_recurrent_check(check_impala),
    metric_names=IMPALA_METRICS,
)
register(
    "appo",
    "trainer.algos.impala:APPO",
    summary=APPO_SUMMARY,
    keys=APPOKeys,
    check=with_recurrent_check(check_appo),
    metric_names=APPO_METRICS,
)
