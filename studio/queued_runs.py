"""The run queue as the studio uses it: `QueueingRuns`, the half of `RunManager` (studio/runs.py)
that starts a run at once when a slot of the runs folder's queue (trainer/run/run_queue.py) is free
and otherwise keeps it waiting, "queued, 2nd in line", until a thread starts it.

A queued run is a run folder with its config.yaml and an entry in the queue file, so it outlives
the studio: the next RunManager on the runs folder adopts it at its old place. Stopping it takes
it out of line; a new run then ends `stopped` at step 0.

No gradio, no torch.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from studio.history import RunState
from studio.run_paths import RunError
from studio.trainer_process import QueuedRun, WorkerJoin, launcher_shape, start_trainer
from trainer.config.permissions import CodePermissionError, require_code_permission
from trainer.run.layout import events_path, holds_a_run, read_config
from trainer.run.run_queue import STUDIO, QueueError, RunQueue

QUEUE_POLL_SECONDS = 0.5  # how often queued runs look for a free slot


class QueueingRuns:
    """RunManager's queue half. The host class provides `_lock`, `_active`, `_followers`, `_context`,
    `_target`, `runs_dir`, `allow_custom_envs`, `cluster_host`, `cluster_port`, `run_dir`,
    `_refreshed` and `_new_join`."""

    queue: RunQueue
    _queued: dict[str, QueuedRun]

    def _init_queue(self, slots: int | None) -> None:
        self.queue = RunQueue(self.runs_dir, slots)  # ValueError for slots < 1
        self._queued = {}  # runs of this studio waiting for a slot
        self._ticker: threading.Thread | None = None  # starts queued runs when slots free
        self._closed = False
        with self._lock:
            self._adopt_queued()

    @property
    def slots(self) -> int:
        """Runs that train at once in this runs folder (the studio's and any sweep's together)."""
        return self.queue.slots

    def _enqueue(self, state: RunState, resume: bool, join: WorkerJoin | None) -> None:
        """Start the run now if a slot is free and no one is ahead of it, else queue it (it starts
        by itself later: `_admit_queued`). Caller holds self._lock."""
        ranks = launcher_shape(state.config)[0]
        try:
            entry = self.queue.join(f"studio run {state.run_id}", ranks, STUDIO, state.run_dir, resume)
            admitted = self.queue.admit(entry)
        except QueueError as error:
            raise RunError(str(error)) from None
        if admitted:
            self._launch(state, resume, join, entry)
            return
        self._queued[state.run_id] = QueuedRun(state, entry, resume, join)
        self._show_place(state, self.queue.place(entry))
        self._tick_in_background()

    def _admit_queued(self) -> None:
        """Start this studio's queued runs that may start now, first in line first; the others
        learn their new place. Caller holds self._lock."""
        for run_id, active in list(self._active.items()):
            self._refreshed(run_id, active.state.run_dir)  # a trainer that ended frees its slot
        for queued in sorted(self._queued.values(), key=lambda run: run.state.queue_place or 0):
            admitted = self.queue.admit(queued.queue_entry)
            if admitted is False:
                break  # first come, first served: the ones behind it wait too
            run_id = queued.state.run_id
            del self._queued[run_id]
            if admitted is None:  # stopped from another studio on this runs folder
                self._cancelled(run_id, queued.state.run_dir)
                continue
            try:
                self._launch(queued.state, queued.resume, queued.join, queued.queue_entry)
            except Exception as error:  # noqa: BLE001 - one run that cannot start must not stop the queue
                with queued.state.lock:
                    queued.state.error_message = f"The queued run could not start: {error}"
                    queued.state.version += 1
        places = self._places()
        for queued in self._queued.values():
            self._show_place(queued.state, places.get(str(queued.state.run_dir.resolve())))

    def _tick_in_background(self) -> None:
        """Make sure a thread starts the queued runs, even while no page looks. Caller holds self._lock."""
        if self._ticker is None and not self._closed:
            self._ticker = threading.Thread(target=self._tick, name="run-queue", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while True:
            time.sleep(QUEUE_POLL_SECONDS)
            with self._lock:
                if self._closed or not self._queued:
                    self._ticker = None
                    return
                try:
                    self._admit_queued()
                except Exception as error:  # noqa: BLE001 - e.g. an unreadable queue file: said on each run
                    for queued in self._queued.values():
                        with queued.state.lock:
                            queued.state.error_message = str(error)
                            queued.state.version += 1

    def _adopt_queued(self) -> None:
        """Queue again the runs an earlier studio on this runs folder left waiting (they keep their
        place in line). Caller holds self._lock."""
        for entry in self.queue.adopt():
            run_dir = Path(entry.run_dir or "")
            run_id = run_dir.name
            try:
                if self.run_dir(run_id).resolve() != run_dir:
                    raise RunError(f"{run_dir} is not a run folder of {self.runs_dir}")
                config = read_config(run_dir)
                require_code_permission(
                    config, self.allow_custom_envs, f"Run {run_id}'s config.yaml", "`python app.py --allow-custom-envs`"
                )
                join = self._new_join(config)
            except (RunError, CodePermissionError):
                self.queue.release(entry.id)
                continue
            state = self._refreshed(run_id, run_dir, places={})
            state.config = config
            self._queued[run_id] = QueuedRun(state, entry.id, entry.resume, join)
        if self._queued:
            self._admit_queued()
            self._tick_in_background()

    def _launch(self, state: RunState, resume: bool, join: WorkerJoin | None, queue_entry: str) -> None:
        """Caller holds self._lock. Starts the run's trainer process (studio/trainer_process.py) in
        the queue slot `queue_entry` holds, which the trainer's process holds from then on."""
        with state.lock:
            state.queue_place = None
        try:
            active = start_trainer(
                self._context,
                state,
                resume,
                join,
                self._target,
                self.cluster_host,
                self.cluster_port,
                self.allow_custom_envs,
            )
        except BaseException:
            self.queue.release(queue_entry)
            raise
        active.queue_entry = queue_entry
        self._active[state.run_id] = active
        self.queue.hand_over(queue_entry, [active.process.pid])

    def _note_place(self, state: RunState, places: dict[str, int] | None) -> None:
        """A run this studio does not train: its place in line if it waits in the run queue (this
        studio's, or another's on this runs folder), else None. Caller holds self._lock."""
        place = (self._places() if places is None else places).get(str(state.run_dir.resolve()))
        if state.run_id in self._queued:
            self._show_place(state, place)
        elif place != state.queue_place:
            with state.lock:
                state.queue_place = place
                state.version += 1

    def _places(self) -> dict[str, int]:
        """Run folder -> place in line of the runs waiting in the queue ({} if it is unreadable)."""
        try:
            return self.queue.places()
        except (QueueError, OSError):
            return {}

    def _show_place(self, state: RunState, place: int | None) -> None:
        """A queued run of this studio: its place in line (the one it had while it is a moment out of line)."""
        with state.lock:
            place = place or state.queue_place or 1  # a moment out of line (adopted just now): as before
            if place != state.queue_place:
                state.queue_place = place
                state.version += 1
            state.settle(owner_alive=False)

    def _cancelled(self, run_id: str, run_dir: Path) -> RunState:
        """A queued run was stopped before it trained: a new run ends `stopped` at step 0 (a resume
        of it starts it from the beginning); a queued resume is again what it was. Caller holds self._lock."""
        if run_dir.is_dir() and not holds_a_run(run_dir, read_config(run_dir)):
            from trainer.run.events import make_event
            from trainer.run.sinks import JsonlSink

            JsonlSink(events_path(run_dir))(make_event("end", status="stopped", step=0, final_model=None))
        state = self._followers[run_id].state if run_id in self._followers else None
        if state is not None:
            with state.lock:
                state.queue_place = None
        return self._refreshed(run_id, run_dir, places={})
