"""The wire between an actor and the learner: a two-process gloo group per actor, and the one
batch format on it (torch.distributed only: no socket protocol of our own, no pickle).

    actor (rank 1)                                   learner's hub (rank 0)
                                      <-  REPLY [magic, version or -1, stop, 0] (+ weights)
    HEADER [magic, actor, sequence, version, E]  ->
    BODY   one float32 vector (LAYOUT below)     ->
                                      <-  REPLY ... (new weights when there are newer ones)

Lockstep: one message in flight per direction, so a pair never has two operations at once. The
learner sizes every buffer from its own config and env (`BatchLayout.for_run`): a peer chooses no
shape and no dtype, only E (the episodes that ended in the batch, at most T x N), and every value
is checked before a batch is queued (`BatchLayout.decode`: finite numbers, 0/1 flags, actions in
range). Weights travel as one float32 vector: the policy's state_dict, in its order.

The pair's rendezvous is the run's c10d store (trainer/cluster/nodes.py) under the run's secret key
prefix: `pair/<generation>/<join number>` (trainer/cluster/learner_hub.py hands out join numbers).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta

import torch
from torch import Tensor

from trainer.algos.experience import ExperienceBatch

MAGIC = 0x524C5354  # "RLST": a message of this format
HEADER_WORDS = 8  # magic, actor, sequence, policy_version, episodes, 0, 0, 0
REPLY_WORDS = 4  # magic, version of the weights that follow (-1: none), stop (1: the run is over), 0
ACTOR_TIMEOUT_SECONDS = 60.0  # a message a peer does not finish within this is a lost peer
TAG_BATCH, TAG_REPLY = 1, 2


class BadBatch(ValueError):
    """A batch that breaks the format: the learner drops its actor (the message says what)."""


def open_pair(store, prefix: str, rank: int, timeout: float = ACTOR_TIMEOUT_SECONDS):
    """The gloo group of one actor (rank 1) and the learner (rank 0); blocks until both are there."""
    from torch.distributed import PrefixStore, ProcessGroupGloo

    return ProcessGroupGloo(PrefixStore(prefix, store), rank, 2, timedelta(seconds=timeout))


def send(group, tensor: Tensor, peer: int, tag: int) -> None:
    group.send([tensor], peer, tag).wait()


def recv(group, tensor: Tensor, peer: int, tag: int) -> Tensor:
    group.recv([tensor], peer, tag).wait()
    return tensor


# ---------------------------------------------------------------------------------------------
# Batches


@dataclass(frozen=True)
class BatchLayout:
    """The shapes of every batch of a run, from the learner's (or actor's) own config and env."""

    steps: int  # T = num_steps
    envs: int  # N = num_envs
    obs_shape: tuple[int, ...]
    actions: int | None  # discrete: the number of actions; None: continuous
    action_dim: int  # continuous: the vector's length; 1 for discrete
    masked: bool  # the env masks actions: (T, N, n) flags follow
    priorities: bool = False  # Ape-X under use_per: (T, N) first priorities follow (trainer/algos/replay_feed.py)

    @classmethod
    def for_run(cls, config, spec: dict, masked: bool = False) -> BatchLayout:
        from trainer.config.algorithm_keys import ALGORITHM_TABLE

        action = spec["action"]
        discrete = action["kind"] == "discrete"
        entry = ALGORITHM_TABLE.get(config.algo)
        return cls(
            config.num_steps,
            config.num_envs,
            tuple(int(size) for size in spec["obs_shape"]),
            int(action["n"]) if discrete else None,
            1 if discrete else int(action["dim"]),
            masked and discrete,
            bool(entry is not None and entry.replay and config.use_per),
        )

    def parts(self, episodes: int) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of each piece of a batch's body, in order."""
        steps, envs, obs = self.steps, self.envs, self.obs_shape
        actions = (steps, envs) if self.actions is not None else (steps, envs, self.action_dim)
        parts = [
            ("obs", (steps, envs, *obs)),
            ("actions", actions),
            ("behaviour_log_probs", (steps, envs)),
            ("rewards", (steps, envs)),
            ("terminated", (steps, envs)),
            ("truncated", (steps, envs)),
            ("final_obs", (steps, envs, *obs)),
            ("next_obs", (envs, *obs)),
            ("episodes", (episodes, 3)),
        ]
        if self.masked:
            parts.append(("action_masks", (steps, envs, self.actions)))
        if self.priorities:
            parts.append(("priorities", (steps, envs)))
        return parts

    def body_size(self, episodes: int) -> int:
        return sum(math.prod(shape) for _, shape in self.parts(episodes))

    def encode(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor]:
        """(header, body) of a batch, ready to send."""
        episodes = int(batch.episodes.shape[0])
        header = torch.tensor(
            [MAGIC, batch.actor, batch.sequence, batch.policy_version, episodes, 0, 0, 0], dtype=torch.int64
        )
        pieces = []
        for name, shape in self.parts(episodes):
            value = getattr(batch, name)
            if value is None or tuple(value.shape) != shape:
                if value is None:
                    raise BadBatch(f"the batch has no {name}, the run's batches have {shape}")
                raise BadBatch(f"{name} has shape {tuple(value.shape)}, the run's batches have {shape}")
            pieces.append(value.detach().to("cpu", torch.float32).reshape(-1))
        return header, torch.cat(pieces)

    def check_header(self, header: Tensor, actor: int, last_sequence: int, version: int) -> tuple[int, int, int]:
        """(sequence, policy_version, episodes) of a header from actor `actor`, which was sent the
        weights of `version` last, or BadBatch."""
        magic, sender, sequence, policy_version, episodes = (int(word) for word in header[:5])
        if magic != MAGIC or sender != actor:
            raise BadBatch(f"not a batch of actor {actor} (magic {magic:#x}, actor {sender})")
        if sequence <= last_sequence:
            raise BadBatch(f"sequence {sequence} after {last_sequence} (a batch is sent once)")
        if policy_version != version:
            raise BadBatch(f"policy version {policy_version}, but it was sent the weights of version {version}")
        if not 0 <= episodes <= self.steps * self.envs:
            raise BadBatch(f"{episodes} episodes in a batch of {self.steps * self.envs} steps")
        return sequence, policy_version, episodes

    def decode(self, body: Tensor, actor: int, sequence: int, policy_version: int, episodes: int) -> ExperienceBatch:
        """The batch in a received body, every value checked (BadBatch names the first bad one)."""
        fields, start = {}, 0
        for name, shape in self.parts(episodes):
            size = math.prod(shape)
            value = body[start : start + size].view(shape)
            start += size
            if not torch.isfinite(value).all():
                raise BadBatch(f"{name} holds a NaN or an infinity")
            if name == "priorities" and bool((value < 0).any()):
                raise BadBatch("a negative priority")
            if name in ("terminated", "truncated", "action_masks"):
                if not ((value == 0) | (value == 1)).all():
                    raise BadBatch(f"{name} holds a value other than 0 and 1")
                value = value.bool()
            elif name == "actions" and self.actions is not None:
                if not ((value >= 0) & (value < self.actions) & (value == value.round())).all():
                    raise BadBatch(f"an action outside 0..{self.actions - 1}")
                value = value.long()
            fields[name] = value
        return ExperienceBatch(**fields, policy_version=policy_version, actor=actor, sequence=sequence)


# ---------------------------------------------------------------------------------------------
# Weights


def flat_weights(policy) -> Tensor:
    """The policy's state_dict as one float32 vector on the CPU (a copy)."""
    return torch.cat([value.detach().to("cpu", torch.float32).reshape(-1) for value in policy.state_dict().values()])


def weights_size(policy) -> int:
    return sum(value.numel() for value in policy.state_dict().values())


@torch.no_grad()
def load_flat_weights(policy, flat: Tensor) -> None:
    """Copy a vector of flat_weights into `policy` (same architecture: same order and sizes)."""
    state, start = policy.state_dict(), 0
    for value in state.values():
        size = value.numel()
        value.copy_(flat[start : start + size].view(value.shape).to(value.dtype))
        start += size
    if start != flat.numel():
        raise BadBatch(f"weights of {flat.numel()} numbers for a network of {start}")


def reason(error: BaseException) -> str:
    """What went wrong on a pair, in a few words ("Connection closed by peer [10.0.0.7]:40211"):
    gloo's first line without its source location and its advice."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\] ", "", text)
    return text.split(". This is typically")[0][:200]


def reply(version: int, stop: bool) -> Tensor:
    return torch.tensor([MAGIC, version, int(stop), 0], dtype=torch.int64)
