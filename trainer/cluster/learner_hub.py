"""The learner's end of an actor-learner run: `LearnerHub`, the ExperienceSource
(trainer/algos/experience.py) that the algorithm takes actors' batches from and hands its weights to.

    hub = LearnerHub(connect, run_id, generation, config, run_dir, master, should_stop)
    train(config, run_dir, experience=hub.start())      # IMPALA / APPO: take() ... publish()

An actor (trainer/cluster/actor.py), once admitted with the token, announces itself in the run's
store under `gen/<generation>/join/<i>`; the hub's accept thread sees each announcement and opens a
gloo pair with it (trainer/cluster/actor_link.py) in a thread of its own, which then receives that
actor's batches, checks them (a bad one drops the actor with a line), queues them and answers with
the newest weights every `weights_every` updates. Every thread has a connection to the store of
its own (`connect()`): a client blocks while it waits for a key, so one pair that never forms must
not hold up the others. So a slow actor holds up only its own thread;
a dead one (its connection closes, or a message stalls past ACTOR_TIMEOUT_SECONDS) is "Actor lost"
and the run goes on. The queue holds `learner_queue_batches` batches: when the learner falls
behind, the oldest is dropped and counted. Sequence numbers per actor keep any batch from being
queued twice. The hub keeps nodes.json's actor rows (trainer/cluster/nodes.py) and writes its lines
(joins, losses) to train.log, the studio's node panel and stdout.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer.algos.experience import ExperienceBatch, ExperienceClosed
from trainer.cluster.actor_link import (
    HEADER_WORDS,
    TAG_BATCH,
    TAG_REPLY,
    BadBatch,
    BatchLayout,
    flat_weights,
    open_pair,
    reason,
    recv,
    reply,
    send,
)
from trainer.cluster.nodes import run_key, write_actor_table

POLL_SECONDS = 0.2
TABLE_SECONDS = 1.0
MAX_JOIN_BYTES = 1024
ANNOUNCE_SECONDS = 10.0


@dataclass
class ActorRow:
    actor: int
    host: str
    hostname: str
    connected_since: float
    batches: int = 0  # batches this actor's thread queued
    steps_per_second: float | None = None
    policy_lag: int | None = None  # learner updates between acting and learning, of its last batch taken
    lost: bool = False
    last_sequence: int = 0
    last_batch_at: float = field(default_factory=time.time)

    def public(self) -> dict:
        return {
            "role": "actor",
            "actor": self.actor,
            "host": self.host,
            "hostname": self.hostname,
            "ranks": 1,
            "steps_per_second": self.steps_per_second,
            "policy_lag": self.policy_lag,
            "batches": self.batches,
            "connected_since": self.connected_since,
            "lost": self.lost,
        }


def run_layout(config) -> BatchLayout:
    """Every batch's shapes, from this process's own config and a one-env copy of the run's env."""
    from trainer.run.setup import config_env_factory, policy_spec

    env = config_env_factory(config, in_process=True)(1, "cpu", config.seed)
    try:
        env.reset(seed=config.seed)
        return BatchLayout.for_run(config, policy_spec(config, env), masked=env.action_masks() is not None)
    finally:
        env.close()


class LearnerHub:
    """Actors' batches in, weights out (the ExperienceSource protocol: take / publish / stats)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        run_id: str,
        generation: int,
        config,
        run_dir: Path | None,
        master: str = "",
        should_stop: Callable[[], bool] = lambda: False,
        layout: BatchLayout | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.connect, self.run_id, self.generation = connect, run_id, generation
        self.layout = layout or run_layout(config)
        self.run_dir, self.master, self.should_stop = run_dir, master, should_stop
        self.capacity = config.learner_queue_batches
        self.weights_every = getattr(config, "weights_every", 1)
        self.queue: deque[ExperienceBatch] = deque()
        self.dropped = 0
        self.version = 0  # the learner's update count at the last publish
        self.weights: tuple[int, torch.Tensor] | None = None  # (version, flat) the actors get
        self.rows: dict[int, ActorRow] = {}
        self.lines: list[str] = []
        self._log = log
        self._ready = threading.Condition()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._groups: set = set()  # the pairs open now (closed at the end, so no thread outlives the hub)

    # -- the ExperienceSource protocol --------------------------------------------------------------

    def take(self) -> ExperienceBatch:
        with self._ready:
            while not self.queue:
                if self._closed.is_set() or self.should_stop():
                    raise ExperienceClosed("the run is stopping")
                self._ready.wait(POLL_SECONDS)
            batch = self.queue.popleft()
        row = self.rows.get(batch.actor)
        if row is not None:
            row.policy_lag = self.version - batch.policy_version
        return batch

    def publish(self, policy, version: int) -> None:
        self.version = int(version)
        if self.weights is None or self.version - self.weights[0] >= self.weights_every:
            self.weights = (self.version, flat_weights(policy))

    def stats(self) -> dict[str, float]:
        return {"queue_depth": len(self.queue), "dropped_batches": self.dropped, "actors": len(self._live())}

    # -- running ------------------------------------------------------------------------------------

    def start(self) -> LearnerHub:
        for target, name in ((self._accept, "actor-accept"), (self._keep_table, "actor-table")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        self._closed.set()
        for group in list(self._groups):
            _abort(group)
        for thread in self._threads:
            thread.join(timeout=2)
        self._write_table(finished=True)
        if self._log_bus is not None:
            self._log_bus.close()

    def say(self, line: str) -> None:
        self.lines = (self.lines + [time.strftime("%Y-%m-%d %H:%M:%S ") + line])[-200:]
        if self._log is not None:
            self._log(line)
            return
        print(line, flush=True)
        if self.run_dir is not None and self.run_dir.is_dir():
            self.log_bus().log(line)

    _log_bus = None

    def log_bus(self):
        if self._log_bus is None:
            from trainer.run.events import EventBus
            from trainer.run.layout import log_path
            from trainer.run.sinks import LogSink

            self._log_bus = EventBus([LogSink(log_path(self.run_dir))])
        return self._log_bus

    def _live(self) -> list[ActorRow]:
        return [row for row in self.rows.values() if not row.lost]

    def _key(self, name: str) -> str:
        return run_key(self.run_id, f"gen/{self.generation}/{name}")

    def _accept(self) -> None:
        """Each actor that announces itself in the store gets a thread of its own. An announcement
        counted but never written (its actor died in between) is skipped after ANNOUNCE_SECONDS."""
        seen, store, waiting_since, said = 0, None, None, False
        while not self._closed.wait(POLL_SECONDS):
            try:
                store = store or self.connect()
                while seen < store.add(self._key("joins"), 0):
                    if not store.check([self._key(f"join/{seen + 1}")]):
                        waiting_since = waiting_since or time.time()
                        if time.time() - waiting_since < ANNOUNCE_SECONDS:
                            break
                        seen, waiting_since = seen + 1, None
                        continue
                    seen, waiting_since = seen + 1, None
                    announcement = store.get(self._key(f"join/{seen}"))
                    store.set(self._key(f"accepted/{seen}"), "1")  # the actor opens its pair after this
                    thread = threading.Thread(
                        target=self._serve, args=(seen, announcement), name=f"actor-{seen}", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
                said = False
            except Exception as error:  # noqa: BLE001 - the master's store: said once, tried again
                store = None
                if not said and not self._closed.is_set():
                    self.say(f"Actors: the run's store is unreachable ({str(error).splitlines()[0][:200]})")
                said = True

    def _serve(self, join: int, announcement: bytes) -> None:
        try:
            fields = json.loads(announcement[:MAX_JOIN_BYTES].decode())
            actor, host, hostname = int(fields["actor"]), str(fields["host"])[:100], str(fields["hostname"])[:100]
            if not 0 < actor < 1_000_000:
                raise ValueError(f"actor number {actor}")
        except (ValueError, KeyError, TypeError) as error:
            self.say(f"Actor refused: a malformed announcement ({error})")
            return
        try:
            group = open_pair(self.connect(), self._key(f"pair/{join}"), 0)
            self._groups.add(group)
        except RuntimeError as error:
            self.say(f"Actor lost: #{actor} at {host} never connected ({reason(error)})")
            return
        previous = self.rows.get(actor)
        row = ActorRow(actor, host, hostname, time.time(), last_sequence=previous.last_sequence if previous else 0)
        row.batches = previous.batches if previous else 0
        self.rows[actor] = row
        self.say(f"Actor connected: #{actor} at {host} ({hostname}); {len(self._live())} actors")
        sent = -1  # the version of the weights this actor has from us
        try:
            while self.weights is None and not self._closed.wait(POLL_SECONDS):
                pass  # the algorithm publishes before it takes its first batch
            sent = self._reply(group, sent)
            header = torch.zeros(HEADER_WORDS, dtype=torch.int64)
            while not self._closed.is_set():
                recv(group, header, 1, TAG_BATCH)
                sequence, version, episodes = self.layout.check_header(header, actor, row.last_sequence, sent)
                body = recv(group, torch.empty(self.layout.body_size(episodes)), 1, TAG_BATCH)
                batch = self.layout.decode(body, actor, sequence, version, episodes)
                row.last_sequence = sequence
                self._queue(batch, row)
                sent = self._reply(group, sent)
        except BadBatch as error:
            row.lost = True
            self.say(f"Actor dropped: #{actor} at {host} sent a bad batch ({error}); {len(self._live())} actors")
        except RuntimeError as error:
            row.lost = True
            if not self._closed.is_set():
                self.say(f"Actor lost: #{actor} at {host} ({reason(error)}); {len(self._live())} actors")
        finally:
            self._groups.discard(group)
            _abort(group)

    def _queue(self, batch: ExperienceBatch, row: ActorRow) -> None:
        now = time.time()
        with self._ready:
            if len(self.queue) >= self.capacity:
                self.queue.popleft()
                self.dropped += 1
            self.queue.append(batch)
            self._ready.notify()
        rate = batch.steps / max(now - row.last_batch_at, 1e-6)
        row.steps_per_second = round(
            rate if row.steps_per_second is None else 0.8 * row.steps_per_second + 0.2 * rate, 1
        )
        row.last_batch_at, row.batches = now, row.batches + 1

    def _reply(self, group, sent: int) -> int:
        """Tell the actor whether the run goes on, with newer weights when there are: their version."""
        weights = self.weights
        fresh = weights is not None and weights[0] > sent
        send(group, reply(weights[0] if fresh else -1, self._closed.is_set()), 1, TAG_REPLY)
        if fresh:
            send(group, weights[1], 1, TAG_REPLY)
            return weights[0]
        return sent

    def _keep_table(self) -> None:
        while not self._closed.wait(TABLE_SECONDS):
            try:
                self._write_table()
            except Exception as error:  # noqa: BLE001 - the table must never stop training
                print(f"actor table: {type(error).__name__}: {error}", flush=True)

    def _write_table(self, finished: bool = False) -> None:
        if self.run_dir is None:
            return
        learner = {"queue_depth": len(self.queue), "dropped_batches": self.dropped, "actors": len(self._live())}
        rows = [row.public() for row in sorted(self.rows.values(), key=lambda row: row.actor)]
        write_actor_table(self.run_dir, self.master, rows, learner, self.lines, finished)


def _abort(group) -> None:
    """Close a pair's sockets now (a thread blocked on it returns with an error), not at the next
    garbage collection."""
    try:
        group.abort()
    except Exception:  # noqa: BLE001, S110 - already closed, or an older torch: the collector closes it
        pass
