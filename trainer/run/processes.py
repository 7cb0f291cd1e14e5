"""Is a process alive, and when did it start: the owner file and the stale-temporary cleanup both
ask (a pid alone can be reused, its start time tells the two apart). Imports neither torch nor
the studio."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine."""
    if pid == os.getpid():
        return True
    try:
        import psutil

        return bool(psutil.pid_exists(pid))
    except ImportError:  # psutil is a requirement, but a listing must not fail without it
        try:
            os.kill(pid, 0)
        except PermissionError:
            return True
        except (OSError, ValueError):
            return False
        return True


def process_started(pid: int) -> float | None:
    """When process `pid` started (unix seconds), or None (no psutil, or no such process)."""
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 - no psutil, or no such process
        return None
