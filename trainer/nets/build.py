"""`build_policy(spec)`: the playing network a spec describes, with new weights (a checkpoint
then loads its own into it). The spec's `network` names its kind; a spec without one (every file
from before DQN and SAC) is PPO's actor-critic.
"""

from __future__ import annotations

from trainer.nets.playing import PlayingNetwork
from trainer.nets.policies import ActorCritic
from trainer.nets.q_network import QNetwork
from trainer.nets.recurrent import RecurrentActorCritic
from trainer.nets.sac_actor import SquashedGaussianActor
from trainer.nets.spec import ModelError

NETWORKS: dict[str, type[PlayingNetwork]] = {
    "actor-critic": ActorCritic,
    "q": QNetwork,
    "recurrent-actor-critic": RecurrentActorCritic,
    "squashed-gaussian": SquashedGaussianActor,
}


def build_policy(spec: dict) -> PlayingNetwork:
    kind = spec.get("network", "actor-critic")
    if kind not in NETWORKS:
        raise ModelError(f"unknown network {str(kind)[:40]!r} in the spec; known: {', '.join(NETWORKS)}")
    return NETWORKS[kind](spec)
