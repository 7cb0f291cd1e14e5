"""A wake-up between two processes that share memory, one `Doorbell` each way: the worker
pool's learner and each of its workers (envs/pool.py)."""

from __future__ import annotations

import os
import platform
import time

import numpy as np

# A waiting side spins (yielding its core) this long before it sleeps: long enough to cover a
# step of a fast env and the learner's work between two steps, so neither side pays the
# scheduler's wake-up (tens of microseconds each way in a VM), short enough that a long wait
# (a slow env, the PPO update) costs a sliver of a core.
SPIN_S = 0.002
# A sleeper's first nap is this short: the bound on a wake-up that crossed its "I am going to
# sleep" flag in the CPUs' store buffers (after it, every ring sees the flag).
MISSED_WAKE_S = 0.005
# Spinning on a counter is only safe where other cores see a core's stores in the order it made
# them (x86's total store order: the results are written before the counter says so). Elsewhere
# (ARM) every wake-up goes through the semaphore, whose operations are memory barriers.
STORES_IN_ORDER = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


class Doorbell:
    """One direction of wake-ups between the learner and one worker. The waker bumps a counter
    in shared memory (`ring`); the waiter (`wait`) spins on it, yielding its core, for up to
    `SPIN_S`, and only then raises its `sleeping` flag and blocks on a semaphore, which the
    waker releases when it sees the flag. A release that finds the waiter already awake leaves
    the semaphore one count ahead: the next blocking wait wakes early, sees the counter
    unchanged, and blocks again. Without `STORES_IN_ORDER`, every ring releases the semaphore
    and every wait takes it."""

    def __init__(self, counts: np.ndarray, sleeping: np.ndarray, index: int, semaphore, spin: float = SPIN_S):
        self.counts, self.sleeping, self.index, self.semaphore = counts, sleeping, index, semaphore
        self.spin = spin

    def ring(self, count: int) -> None:
        self.counts[self.index] = count
        if self.sleeping[self.index] or not STORES_IN_ORDER:
            self.semaphore.release()

    def wait(self, count: int, timeout: float) -> bool:
        """Until the counter reads `count`: True, or False after about `timeout` seconds."""
        if not STORES_IN_ORDER:  # one release per ring: take it
            return self.semaphore.acquire(timeout=timeout)
        counts, index = self.counts, self.index
        clock, spin_end = time.perf_counter, time.perf_counter() + self.spin
        while counts[index] != count:
            if clock() > spin_end:
                return self._sleep_until(count, spin_end + timeout)
            os.sched_yield()
        return True

    def _sleep_until(self, count: int, deadline: float) -> bool:
        counts, index = self.counts, self.index
        self.sleeping[index] = 1
        nap = MISSED_WAKE_S
        try:
            while counts[index] != count:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                self.semaphore.acquire(timeout=min(remaining, nap))
                nap = remaining  # the flag is seen by now: later naps last until a ring or the deadline
            return True
        finally:
            self.sleeping[index] = 0
