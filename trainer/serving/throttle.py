"""Failed attempts make the next ones wait: the one throttle for every secret a client can guess
(the cluster's join token, the studio's login and its /metrics password).

After `max_failures` failures within `window_seconds` a key is locked for `lockout_seconds`,
doubling on each further lockout; a success clears it. A key is whatever the caller counts by:
the socket's peer address (never a header a client sets), or the address and a user name.
Memory is bounded: past `max_keys` the oldest idle records are forgotten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class _Record:
    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0
    lockouts: int = 0


class FailureThrottle:
    def __init__(
        self,
        max_failures: int = 5,
        window_seconds: float = 60.0,
        lockout_seconds: float = 30.0,
        max_keys: int = 10_000,
        clock=time.monotonic,
    ):
        self.max_failures, self.window_seconds, self.lockout_seconds = max_failures, window_seconds, lockout_seconds
        self.max_keys, self.clock = max_keys, clock
        self.records: dict[Hashable, _Record] = {}
        self._lock = threading.Lock()  # the cluster's gate answers from several threads

    def wait_left(self, key: Hashable) -> float:
        """Seconds `key` must still wait (0: it may try now)."""
        with self._lock:
            record = self.records.get(key)
            return max(0.0, record.locked_until - self.clock()) if record is not None else 0.0

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self.records.pop(key, None)

    def failed(self, key: Hashable) -> float:
        """Count a failure; returns the seconds `key` is now locked for (0: not locked)."""
        with self._lock:
            now = self.clock()
            if key not in self.records and len(self.records) >= self.max_keys:
                self._forget_oldest(now)
            record = self.records.setdefault(key, _Record())
            record.failures = [t for t in record.failures if now - t < self.window_seconds] + [now]
            if len(record.failures) < self.max_failures:
                return 0.0
            record.locked_until = now + self.lockout_seconds * 2**record.lockouts
            record.lockouts += 1
            record.failures.clear()
            return record.locked_until - now

    def _forget_oldest(self, now: float) -> None:
        idle = [key for key, record in self.records.items() if record.locked_until <= now and not record.failures]
        for key in idle or list(self.records)[: len(self.records) // 2]:
            self.records.pop(key, None)


def retry_after(seconds: float) -> int:
    """Whole seconds for a Retry-After header (at least 1)."""
    return max(1, int(seconds + 0.999))
