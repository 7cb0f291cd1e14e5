"""Stop requests a trainer process honours, in one place: SIGTERM / SIGINT, a stop event from the
studio, and the death of the studio that started it.

    stop = StopRequest(stop_event)      # stop_event: anything with is_set(), or None
    stop.install_signals()              # SIGTERM / SIGINT -> a clean stop (main thread only)
    stop.watch_parent()                 # the parent process dies -> a clean stop
    train(config, run_dir, should_stop=stop)

A clean stop ends the current update, saves a checkpoint and the final model and writes the
`end` event, so a trainer never outlives (or is orphaned by) the studio that started it, and a
restarted studio stops a trainer it adopted with SIGTERM.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from typing import Any

from trainer.run.processes import process_started

PARENT_POLL_SECONDS = 0.5


class StopRequest:
    """A `should_stop` callable: true once a signal, the stop event or the parent's death asked."""

    def __init__(self, stop_event: Any = None):
        self.stop_event = stop_event
        self.reason: str | None = None

    def __call__(self) -> bool:
        if self.reason is None and self.stop_event is not None and self.stop_event.is_set():
            self.reason = "the studio asked"
        return self.reason is not None

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            print(f"Stopping after this update and saving ({reason})...", file=sys.stderr, flush=True)

    def install_signals(self) -> bool:
        """SIGTERM and SIGINT ask for a stop; a second SIGINT aborts at once. False when this is
        not the main thread (Python only lets the main thread install handlers)."""

        def on_signal(signum: int, frame: Any) -> None:
            if self.reason is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.request(f"signal {signal.Signals(signum).name}")

        try:
            signal.signal(signal.SIGINT, on_signal)
            signal.signal(signal.SIGTERM, on_signal)
        except ValueError:
            return False
        return True

    def watch_parent(self, poll_seconds: float = PARENT_POLL_SECONDS) -> threading.Thread:
        """A daemon thread that asks for a stop when the process that started this one is gone.
        A process started through multiprocessing (the studio's trainers, which come from a fork
        server, and the launcher's ranks) watches its creator's sentinel: the fork server, its
        OS parent, outlives the studio while any of its children runs. Any other process watches
        its OS parent: gone when the process is re-parented (getppid changes) or its pid now
        names another process (start time)."""
        creator = multiprocessing.parent_process()
        parent = creator.pid if creator is not None else os.getppid()
        parent_started = None if creator is not None else process_started(parent)
        finished = threading.Event()

        def parent_gone() -> bool:
            if creator is not None:
                return not creator.is_alive()
            if os.getppid() != parent:
                return True
            started = process_started(parent)
            return parent_started is not None and started is not None and abs(started - parent_started) > 1.0

        def watch() -> None:
            while not finished.wait(poll_seconds):
                if parent_gone():
                    self.request(f"the process that started this trainer ({parent}) has exited")
                    return

        thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
        thread.finished = finished  # type: ignore[attr-defined]  (tests end it early)
        thread.start()
        return thread
