"""The elastic agents' rendezvous: torch's c10d dynamic rendezvous with a signed state.

torch keeps the rendezvous state in the store as a pickle that every agent loads, so whoever
can write that key runs code on every agent. The key's name holds the run's secret rendezvous
id (trainer/cluster/admission.py hands it only to nodes that proved the token), and on top of that
every state written here carries HMAC(key, state), the key derived from the token: a state
without a valid MAC (a node that was not admitted, or a value planted in the store) is never
unpickled. It is refused, logged, and the next write of an admitted agent replaces it.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from collections.abc import Callable

from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

BACKEND_NAME = "rl-studio"
MAC_BYTES = 32


def state_key(token: str, run_id: str) -> bytes:
    return hmac.new(token.encode(), f"rendezvous-state|{run_id}".encode(), hashlib.sha256).digest()


class SignedBackend(C10dRendezvousBackend):
    """C10dRendezvousBackend whose states are `MAC || pickle`, checked before torch unpickles them."""

    def __init__(self, store, run_id: str, key: bytes, on_refused: Callable[[str], None]):
        super().__init__(store, run_id)
        self._mac_key, self._on_refused = key, on_refused
        self._last_good: bytes | None = None
        self._refused: bytes | None = None  # the intruder's value last refused (said once)

    @property
    def name(self) -> str:
        return BACKEND_NAME

    def _mac(self, state: bytes) -> bytes:
        return hmac.new(self._mac_key, state, hashlib.sha256).digest()

    def set_state(self, state: bytes, token=None):
        result = super().set_state(self._mac(state) + state, token)
        if result is None:
            return None
        new_state, new_token, _ = result
        return new_state, new_token, new_state == state

    def _decode_state(self, base64_state: bytes):
        pair = super()._decode_state(base64_state)
        if pair is None:
            return None
        signed, token = pair
        state = signed[MAC_BYTES:]
        if len(signed) > MAC_BYTES and hmac.compare_digest(signed[:MAC_BYTES], self._mac(state)):
            self._last_good = state
            return state, token
        if self._refused != token:
            self._refused = token
            self._on_refused(
                "refused: the rendezvous state was written by a node that was not admitted (no valid "
                "signature); it was not loaded, and this agent writes the last good state over it"
            )
        # The intruder's token with a state we trust: the handler's next write replaces the intruder's.
        return (self._last_good if self._last_good is not None else _empty_state()), token


def _empty_state() -> bytes:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousState

    return pickle.dumps(_RendezvousState())


def register_signed_rendezvous(token: str, say: Callable[[str], None]) -> str:
    """Register the `rl-studio` rendezvous backend for this process's elastic agent; its name."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    def create(params):
        _, store = create_backend(params)
        backend = SignedBackend(store, params.run_id, state_key(token, params.run_id), say)
        handler = create_handler(store, backend, params)
        handler.get_backend = lambda: BACKEND_NAME  # the registry checks the handler answers to its name
        return handler

    rendezvous_handler_registry._registry.pop(BACKEND_NAME, None)  # this process's token, not an earlier one
    rendezvous_handler_registry.register(BACKEND_NAME, create)
    return BACKEND_NAME
