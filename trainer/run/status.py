"""A run's state, one rule for a run the studio started and one found on disk alike."""

from __future__ import annotations

END_STATUSES = ("finished", "stopped", "failed")  # what an `end` event may say
QUEUED = "queued"  # waiting in the run queue (trainer/run/run_queue.py) for a free slot
ACTIVE_STATUSES = ("starting", "running", "stopping")  # a process trains it
RUN_STATUSES = (QUEUED, *ACTIVE_STATUSES, *END_STATUSES, "interrupted")  # every value of run_status
NOT_OVER_STATUSES = (QUEUED, *ACTIVE_STATUSES)  # waits for a slot or trains: not to be deleted or resumed
RESUMABLE_STATUSES = ("stopped", "failed", "interrupted")  # ended short of its budget: a resume goes on


def run_status(
    end_status: str | None, owner_alive: bool, started: bool, stopping: bool = False, queued: bool = False
) -> str:
    """The one rule for a run's state, for a run the studio started and one found on disk alike.

    end_status: the status of the `end` event that closed the latest segment (None if none did);
    owner_alive: the process that trains it lives (the studio's own child, or owner.json's pid);
    started: the latest segment's `start` event was seen; stopping: a stop was asked for;
    queued: the run waits in the run queue for a slot (a new run, or a resume of an ended one).
    """
    if queued and not owner_alive:
        return QUEUED
    if end_status is not None:
        return end_status if end_status in END_STATUSES else "failed"
    if not owner_alive:
        return "interrupted"
    if stopping:
        return "stopping"
    return "running" if started else "starting"


def queued_text(place: int | None) -> str:
    """A queued run's status with its place in line: "queued, 2nd in line" (1st: the next to start)."""
    if place is None:
        return QUEUED
    suffix = "th" if 10 <= place % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(place % 10, "th")
    return f"{QUEUED}, {place}{suffix} in line"
