"""An actor of an actor-learner run: `python -m trainer worker --master HOST:PORT --role actor`
(or one of the `--actors N` the master starts beside its learner).

It is admitted with the run's token like any worker (trainer/cluster/admission.py), builds the
run's env and network from the config the master sent (custom code only with this machine's own
--allow-custom-envs), takes a number in the run (`actors/next` in the store) and then, for each
learner generation: announces itself, opens its gloo pair with the learner's hub
(trainer/cluster/actor_link.py, trainer/cluster/learner_hub.py), and plays batches
(trainer/algos/acting.py `player_for`: `act_batch` for IMPALA / APPO, Ape-X's `ReplayPlayer` of
trainer/algos/replay_feed.py for DQN / SAC) with the newest weights it was sent, one batch after another,
each with the next sequence number. When the learner goes (a crash: the master restarts it from
its newest checkpoint under a new generation), the actor waits for the next generation and
reconnects by itself; when the run is finished, or the master is gone, it ends.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import torch

from trainer.cluster.actor_link import (
    REPLY_WORDS,
    TAG_BATCH,
    TAG_REPLY,
    BatchLayout,
    load_flat_weights,
    open_pair,
    reason,
    recv,
    send,
    weights_size,
)
from trainer.cluster.nodes import run_key

WAIT_SECONDS = 0.5


class RunOver(Exception):
    """The run finished (or its master is gone): the actor's work is done."""


class Actor:
    """One actor's env, network and counters; `run()` plays until the run is over."""

    def __init__(self, config, store, run_id: str, host: str, say: Callable[[str], None] = print, stop=None):
        from trainer.algos.acting import player_for
        from trainer.run.seeding import seeds
        from trainer.run.setup import config_env_factory, policy_spec, set_threads

        # The learner's thread rule (one torch thread for a small MLP): with torch's default of every
        # core the threads fight over them (CartPole, 128 envs, 2 busy cores: 50-80 k steps/s with
        # one thread, 1-3 k with two).
        set_threads(config, torch.device("cpu"))
        self.config, self.store, self.run_id, self.host, self.say = config, store, run_id, host, say
        self.stop = stop or (lambda: False)
        self.number = int(store.add(run_key(run_id, "actors/next"), 1))
        start = seeds(config.seed, self.number)
        torch.manual_seed(start.network)  # the learner's initial weights (used until the first ones arrive)
        self.env = config_env_factory(config)(config.num_envs, "cpu", start.env)
        self.obs = self.env.reset(seed=start.env)
        spec = policy_spec(config, self.env)
        self.player = player_for(config, spec)  # what it plays with: IMPALA / APPO's policy, or Ape-X's nets
        self.policy = self.player.module  # the learner's weights load into it
        self.layout = BatchLayout.for_run(config, spec, masked=self.env.action_masks() is not None)
        self.generator = torch.Generator().manual_seed(start.sampling)
        self.weights = torch.empty(weights_size(self.policy))
        self.version = 0  # the learner's update count of the weights in use
        self.sequence = 0  # batches sent (the next one is sequence + 1)
        self.steps = 0

    def _key(self, name: str) -> str:
        return run_key(self.run_id, name)

    def run(self) -> int:
        """Play for the learner of each generation until the run is over; the batches sent. After
        a loss it announces itself again to the newest generation: the same learner (it was only
        cut off) or, once the master has restarted it, the new one."""
        try:
            while True:
                self._serve(self._generation())
                time.sleep(WAIT_SECONDS)
        except RunOver:
            return self.sequence
        finally:
            self.env.close()

    def _over(self) -> bool:
        try:
            return self.stop() or self.store.check([self._key("finished")])
        except Exception:  # noqa: BLE001 - the master (and its store) is gone
            return True

    def _generation(self) -> int:
        """The newest learner generation (waits for the first)."""
        while True:
            if self._over():
                raise RunOver
            try:
                generation = int(self.store.add(self._key("learner/generation"), 0))
            except Exception:  # noqa: BLE001
                raise RunOver from None
            if generation > 0:
                return generation
            time.sleep(WAIT_SECONDS)

    def _serve(self, generation: int) -> None:
        """Announce this actor to the hub of `generation`, then play batches for it until it goes."""
        join = int(self.store.add(self._key(f"gen/{generation}/joins"), 1))
        announcement = {"actor": self.number, "host": self.host, "hostname": socket.gethostname()}
        self.store.set(self._key(f"gen/{generation}/join/{join}"), json.dumps(announcement))
        while not self.store.check([self._key(f"gen/{generation}/accepted/{join}")]):  # the hub saw it
            if self._over() or int(self.store.add(self._key("learner/generation"), 0)) != generation:
                return  # the run is over, or that learner is gone: the caller decides
            time.sleep(WAIT_SECONDS / 5)
        try:
            group = open_pair(self.store, self._key(f"gen/{generation}/pair/{join}"), 1)
        except RuntimeError as error:
            self.say(f"Actor {self.number}: no learner answered ({reason(error)}); waiting for the next one")
            return
        self.say(f"Actor connected: #{self.number} to the learner (generation {generation})")
        try:
            self._take_reply(group)
            while not self.stop():
                self.sequence += 1
                batch, self.obs = self.player.act(
                    self.env,
                    self.obs,
                    self.generator,
                    self.config.num_steps,
                    self.version,
                    actor=self.number,
                    sequence=self.sequence,
                )
                header, body = self.layout.encode(batch)
                send(group, header, 0, TAG_BATCH)
                send(group, body, 0, TAG_BATCH)
                self.steps += batch.steps
                self._take_reply(group)
            raise RunOver
        except RuntimeError as error:
            if self._over():
                raise RunOver from None
            self.say(f"Actor {self.number}: lost the learner ({reason(error)}); reconnecting")
        finally:
            try:
                group.abort()
            except Exception:  # noqa: BLE001, S110 - an older torch: the collector closes the sockets
                pass

    def _take_reply(self, group) -> None:
        answer = recv(group, torch.zeros(REPLY_WORDS, dtype=torch.int64), 0, TAG_REPLY)
        version, stop = int(answer[1]), bool(answer[2])
        if version >= 0:
            load_flat_weights(self.policy, recv(group, self.weights, 0, TAG_REPLY))
            self.version = version
        if stop:
            raise RunOver
