"""A recurrent policy (`model_type: ppo-lstm`) behind the policy server (trainer/serving/serve.py):
the state of each client `session`, kept from one request to the next, and one step for the
requests of several sessions at once.

    sessions = Sessions(max_sessions=10_000)
    actions = recurrent_pass(policy, sessions, requests, deterministic, masks)

A session holds one state per observation row of its requests; its first request, one with
another number of rows than its last, and rows with `episode_start` true start from the state of a
new episode (zeros). Past `max_sessions` the least recently used session is forgotten (its client
starts over, as after an episode start), so the memory a server holds is bounded.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

MAX_SESSIONS = 10_000  # client sessions kept by default (a state of 128 floats x 2 per observation row)


class Sessions:
    """The state (h, c), each (1, rows, size), of every session, least recently used first."""

    def __init__(self, max_sessions: int = MAX_SESSIONS):
        self.max_sessions = max_sessions
        self.states: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def get(self, session: str, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The session's state, or None (a new episode) when unknown or of another number of rows."""
        state = self.states.get(session)
        return state if state is not None and state[0].shape[1] == rows else None

    def put(self, session: str, state: tuple[np.ndarray, np.ndarray]) -> None:
        self.states[session] = state
        self.states.move_to_end(session)
        while len(self.states) > self.max_sessions:
            self.states.popitem(last=False)

    def __len__(self) -> int:
        return len(self.states)


def recurrent_pass(
    policy: Any, sessions: Sessions, requests: list[Any], deterministic: bool, masks: np.ndarray | None
) -> np.ndarray:
    """One step of `policy` (a RecurrentActorCritic) for requests of distinct sessions (each with
    `obs` (rows, *shape), `session`, `episode_start` (rows,) or None), their states side by side;
    each session's new state is kept. `masks`: the requests' action masks, one row per observation."""
    size = policy.state_size
    states = [sessions.get(request.session, len(request.obs)) for request in requests]
    h, c = (
        np.concatenate(
            [
                np.zeros((1, len(request.obs), size), np.float32) if state is None else state[part]
                for request, state in zip(requests, states)
            ],
            axis=1,
        )
        for part in (0, 1)
    )
    starts = np.concatenate(
        [
            request.episode_start if request.episode_start is not None else np.zeros(len(request.obs), np.bool_)
            for request in requests
        ]
    )
    obs = np.concatenate([request.obs for request in requests])
    actions, (h, c) = policy.predict(obs, (h, c), starts, deterministic, masks)
    start = 0
    for request in requests:
        rows = slice(start, start + len(request.obs))
        sessions.put(request.session, (h[:, rows].copy(), c[:, rows].copy()))
        start = rows.stop
    return actions
