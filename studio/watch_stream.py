"""The Watch tab's frames over time (studio/watch.py plays them): waiting for a run's first model,
and the player's frames made in a thread of their own at the lowest priority, the newest handed
to the browser.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


def wait_for_player(
    make_player: Callable[[], Any], still_training: Callable[[], bool], no_model: type[Exception], pause: float = 1.0
) -> Iterator[Any]:
    """Messages while the run has no model yet, then its player: Watch pressed before the
    first checkpoint starts playing by itself once one lands. `make_player` raises `no_model`
    while there is none; that error is raised again once `still_training()` is False."""
    said = None
    while True:
        try:
            yield make_player()
            return
        except no_model as error:
            if not still_training():
                raise
            if str(error) != said:
                said = str(error)
                yield f"{error} Waiting for it…"
        time.sleep(pause)


def lower_this_threads_priority() -> None:
    """nice 19 for the calling thread only (Linux schedules threads as tasks): under contention
    the trainers' processes get the cores and the watcher drops frames instead."""
    import os

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass  # not Linux, or not allowed: the pacing alone bounds the cost


def stream_frames(player: Any) -> Iterator[Any]:
    """The player's frames, made in a thread of their own at the lowest priority; the newest
    is handed over (a slow browser skips frames rather than slowing the game). Closing the
    iterator (Gradio does when the tab closes or Stop is pressed) ends the thread."""
    import queue

    frames: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def produce() -> None:
        lower_this_threads_priority()
        try:
            for frame in player.frames(stop.is_set):
                while True:
                    try:
                        frames.put_nowait(frame)
                        break
                    except queue.Full:
                        try:
                            frames.get_nowait()  # drop the oldest
                        except queue.Empty:
                            pass
        finally:
            frames.put(None)

    thread = threading.Thread(target=produce, name="watch-player", daemon=True)
    thread.start()
    try:
        while True:
            frame = frames.get()
            if frame is None:
                return
            yield frame
    finally:
        stop.set()
        thread.join(timeout=5)
