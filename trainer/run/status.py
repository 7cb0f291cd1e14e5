"""A run's state, one rule for a run the studio started and one found on disk alike."""

from __future__ import annotations

END_STATUSES = ("finished", "stopped", "failed")  # what an `end` event may say


def run_status(end_status: str | None, owner_alive: bool, started: bool, stopping: bool = False) -> str:
    """The one rule for a run's state, for a run the studio started and one found on disk alike.

    end_status: the status of the `end` event that closed the latest segment (None if none did);
    owner_alive: the process that trains it lives (the studio's own child, or owner.json's pid);
    started: the latest segment's `start` event was seen; stopping: a stop was asked for.
    """
    if end_status is not None:
        return end_status if end_status in END_STATUSES else "failed"
    if not owner_alive:
        return "interrupted"
    if stopping:
        return "stopping"
    return "running" if started else "starting"
