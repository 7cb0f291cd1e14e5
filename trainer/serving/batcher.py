"""The policy server's batching: every request waiting goes through the model in one forward pass.

`Batcher.act` queues a request; the loop takes all that wait (up to `max_rows` observations) into
the next pass, so the batch grows with the load and one client alone waits for nothing. A
recurrent policy's requests of one session go through one pass each, in order (trainer/serving/sessions.py
keeps the state between them). trainer/serving/serve.py puts it behind HTTP.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer.run.checkpoint import TrainedModel
from trainer.serving.act_request import MAX_ROWS
from trainer.serving.sessions import Sessions, recurrent_pass


@dataclass
class ServeStats:
    requests: int = 0
    forward_passes: int = 0
    largest_batch: int = 0


@dataclass
class Pending:
    obs: np.ndarray
    deterministic: bool
    future: asyncio.Future = field(repr=False)
    mask: np.ndarray | None = None  # bool (rows, n): the allowed actions, when the request gave them
    session: str | None = None  # a recurrent policy's client, whose state `Sessions` keeps
    episode_start: np.ndarray | None = None  # bool (rows,): where the client's envs start an episode


def _masks(model: TrainedModel, batch: list[Pending]) -> np.ndarray | None:
    """The requests' action masks as one (rows, n) array (rows without one allow every action), or None."""
    if all(pending.mask is None for pending in batch):
        return None
    size = model.policy.action_size
    return np.concatenate(
        [p.mask if p.mask is not None else np.ones((len(p.obs), size), dtype=np.bool_) for p in batch]
    )


class Batcher:
    """Runs the model on every request waiting, as one batch.

    While a pass runs, new requests queue up; the next pass takes them all (up to `max_rows`
    observations), so the batch grows with the load and one client alone waits for nothing.
    `max_wait_s` > 0 holds the first request that long for company (more batching, more latency)."""

    def __init__(
        self,
        model: TrainedModel,
        stats: ServeStats,
        max_rows: int = MAX_ROWS,
        max_wait_s: float = 0.0,
        sessions: Sessions | None = None,
    ):
        self.model, self.stats, self.max_rows, self.max_wait_s = model, stats, max_rows, max_wait_s
        self.sessions = sessions if sessions is not None else Sessions()
        self.queue: asyncio.Queue[Pending] | None = None
        self.task: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def act(
        self,
        obs: np.ndarray,
        deterministic: bool,
        mask: np.ndarray | None = None,
        session: str | None = None,
        episode_start: np.ndarray | None = None,
    ) -> np.ndarray:
        loop = asyncio.get_running_loop()
        if self.task is None or self.loop is not loop:  # started lazily, in the loop that serves
            self.loop, self.queue = loop, asyncio.Queue()
            self.task = loop.create_task(self._run(self.queue))
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(Pending(obs, deterministic, future, mask, session, episode_start))
        return await future

    async def _run(self, queue: asyncio.Queue) -> None:
        carry: Pending | None = None  # a request that did not fit into the previous batch
        while True:
            batch = [carry if carry is not None else await queue.get()]
            carry = None
            # Let the handlers that are ready parse their requests and join this batch.
            await asyncio.sleep(self.max_wait_s)
            rows = len(batch[0].obs)
            while not queue.empty():
                pending = queue.get_nowait()
                if rows + len(pending.obs) > self.max_rows:
                    carry = pending
                    break
                batch.append(pending)
                rows += len(pending.obs)
            try:
                # In the event loop itself: a policy's pass takes far less than a hop to a worker
                # thread and back, and requests arriving meanwhile wait in the socket buffers,
                # to be parsed and queued for the next pass.
                results = self._forward(batch)
            except Exception as error:  # noqa: BLE001 - handed to the waiting requests
                results = [error] * len(batch)
            for pending, result in zip(batch, results):
                if pending.future.done():
                    continue  # the client went away
                if isinstance(result, Exception):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)

    def _forward(self, batch: list[Pending]) -> list[np.ndarray]:
        """One forward pass per `deterministic` value present (usually one); a recurrent policy's
        requests of one session go through one pass each, in order (each continues the last)."""
        results: list[Any] = [None] * len(batch)
        waiting = list(range(len(batch)))
        while waiting:
            this_pass, later, seen = [], [], set()
            for index in waiting:
                session = batch[index].session
                (later if session is not None and session in seen else this_pass).append(index)
                seen.add(session)
            self._forward_pass(batch, this_pass, results)
            waiting = later
        return results

    def _forward_pass(self, batch: list[Pending], indices: list[int], results: list[Any]) -> None:
        for deterministic in (True, False):
            members = [index for index in indices if batch[index].deterministic == deterministic]
            if not members:
                continue
            chosen = [batch[index] for index in members]
            if self.model.policy.recurrent:
                actions = recurrent_pass(
                    self.model.policy, self.sessions, chosen, deterministic, _masks(self.model, chosen)
                )
            else:
                obs = np.concatenate([pending.obs for pending in chosen])
                masks = _masks(self.model, chosen)
                actions = self.model.predict(obs, deterministic=deterministic, action_masks=masks)[0]
            self.stats.forward_passes += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(actions))
            start = 0
            for index in members:
                count = len(batch[index].obs)
                results[index] = actions[start : start + count]
                start += count
