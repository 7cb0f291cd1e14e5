"""Training runs as the studio sees them: `RunManager` starts, stops, resumes and deletes them.

Each run's trainer runs in its own process with a stop event, forked from a fork server that has
already imported the trainer (`TRAINER_START_METHOD`). Every run, started here
or found in the runs folder (an earlier studio, the CLI), is followed the same way: a
`RunFollower` (studio/history.py) reads what its metrics.jsonl gained each time the run is
looked at, and one rule (`trainer.run.status.run_status`) gives its state. A run starts when the
runs folder's run queue has a free slot, else it waits, "queued, 2nd in line", and starts by itself
(studio/queued_runs.py, trainer/run/run_queue.py). Browser sessions only
ever read snapshots, so any number of tabs can watch the same run, and closing a tab stops nothing.

A run on several processes (`nproc_per_node`) or one that accepts workers (`max_nodes` > 1) is
started through the CLI's elastic launcher (trainer.cluster.process.run_launched): its process is the
run's master. One that accepts workers listens on the studio's cluster address (loopback unless
`python app.py --cluster-host` says otherwise) with a new token, which only `worker_join` tells
(the page that started the run shows it).

This module does not import gradio or torch: it is the part of the studio a trainer process
never needs, and it is tested on its own with a fake trainer.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from studio.history import ACTIVE_STATUSES, RESUMABLE_STATUSES, GifInfo, RunFollower, RunSnapshot, RunState  # noqa: F401 - re-exported: the studio's names for a run
from studio.queued_runs import QueueingRuns
from studio.run_paths import (  # noqa: F401 - re-exported: what the studio imports about runs
    RUN_ID_PATTERN,
    RunError,
    RunLimitError,
    UnknownRunError,
    is_inside,
    safe_run_file,
    validate_run_id,
)
from studio.trainer_process import (
    TRAINER_START_METHOD,
    ActiveRun,
    TrainerTarget,
    WorkerJoin,
    launcher_shape,
    start_fork_server,
    stoppable_trainer,
    trainer_context,
)
from trainer.cluster.admission import new_token
from trainer.cluster.nodes import DEFAULT_PORT
from trainer.config.permissions import CodePermissionError, require_code_permission
from trainer.run.layout import CONFIG_FILE, EVENTS_FILE, create_run_dir, read_config, write_config
from trainer.run.notes import write_run_notes
from trainer.run.owner import live_owner


class RunManager(QueueingRuns):
    """Starts, stops, resumes and deletes runs; the one shared state of the studio."""

    def __init__(
        self,
        runs_dir: str | os.PathLike,
        max_concurrent_runs: int = 16,
        target: TrainerTarget | None = None,
        start_method: str = TRAINER_START_METHOD,
        allow_custom_envs: bool = False,
        cluster_host: str = "127.0.0.1",
        cluster_port: int = DEFAULT_PORT,
        slots: int | None = None,
        start_fork_server_now: bool = True,
    ):
        """max_concurrent_runs: runs this studio holds at once, training or queued (one more is
        refused); slots: runs that train at once in the runs folder, the studio's and any sweep's
        (trainer/run/run_queue.py; None: one per GPU, else per usable CPU core);
        start_fork_server_now=False: the trainers' fork server (seconds of CPU importing torch)
        starts at `start_fork_server()` or the first run, e.g. once the page answers."""
        if max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs must be at least 1, got {max_concurrent_runs}")
        self.runs_dir = Path(runs_dir).expanduser().resolve()
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.max_concurrent_runs = max_concurrent_runs
        self.allow_custom_envs = allow_custom_envs  # may a run folder's config name code (resume)?
        # Where a run that accepts workers listens: loopback unless the studio's owner opens it.
        self.cluster_host, self.cluster_port = cluster_host, cluster_port
        self._target = target
        self._start_method = start_method
        self._context = trainer_context(start_method, start_now=start_fork_server_now)
        self._lock = threading.RLock()
        self._active: dict[str, ActiveRun] = {}  # runs whose trainer this studio started
        self._followers: dict[str, RunFollower] = {}  # every run looked at so far
        self._init_queue(slots)

    # ---- paths

    def run_dir(self, run_id: str) -> Path:
        """The folder of run `run_id`; RunError if the id is malformed or escapes the runs folder."""
        run_id = validate_run_id(run_id)
        path = self.runs_dir / run_id
        if not is_inside(path, self.runs_dir) or path.resolve() == self.runs_dir:
            raise RunError(f"{run_id!r} does not name a folder inside the runs folder.")
        return path

    # ---- lifecycle

    def start_fork_server(self) -> None:
        """Start the trainers' fork server now (see __init__'s start_fork_server_now). Where it cannot
        start (its Unix socket lives under TMPDIR: a long TMPDIR makes the path too long for one),
        trainers are spawned instead: each run starts a few seconds slower, and the studio says why."""
        try:
            start_fork_server(self._start_method)
        except OSError as error:
            with self._lock:
                self._start_method, self._context = "spawn", trainer_context("spawn")
            print(
                f"note: trainers start without a fork server ({error}); each run starts a few seconds slower",
                file=sys.stderr,
            )

    def start(self, config: dict) -> RunState:
        """Create a run folder for `config` (already validated) and start its trainer."""
        with self._lock:
            self._check_capacity()
            self._check_disk()  # before the folder exists: a full disk would stop it at its first checkpoint
            join = self._new_join(config)
            run_dir = create_run_dir(config, self.runs_dir)  # named as the trainer's CLI names them
            write_config(run_dir, config)
            follower = self._followers[run_dir.name] = RunFollower(run_dir.name, run_dir)
            follower.state.config = dict(config)
            self._enqueue(follower.state, resume=False, join=join)
            return follower.state

    def resume(self, run_id: str) -> RunState:
        """Continue a stopped, failed or interrupted run from its last checkpoint."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            if run_id in self._active or run_id in self._queued:
                state = "queued" if run_id in self._queued else "still running"
                raise RunError(f"Run {run_id} is {state}; there is nothing to resume.")
            owner = live_owner(run_dir)
            if owner is not None:
                raise RunError(
                    f"Run {run_id} is being trained by {owner.describe()}; it can be resumed once "
                    "that process has ended."
                )
            snapshot = self._refreshed(run_id, run_dir).snapshot()
            if snapshot.status not in RESUMABLE_STATUSES:
                raise RunError(
                    f"Run {run_id} is {snapshot.status}; only stopped, failed or interrupted "
                    "runs can be resumed. Start a new run to train further."
                )
            config = read_config(run_dir) or snapshot.config
            # A run folder is data: an entry point in its config.yaml runs code only with permission.
            try:
                require_code_permission(
                    config, self.allow_custom_envs, f"Run {run_id}'s config.yaml", "`python app.py --allow-custom-envs`"
                )
            except CodePermissionError as error:
                raise RunError(str(error)) from None
            # No checkpoint (it died before its first one): the trainer starts it again from step 0.
            self._check_capacity()
            join = self._new_join(config)
            state = self._followers[run_id].state
            state.config = config
            self._enqueue(state, resume=True, join=join)
            return state

    def stop(self, run_id: str) -> RunState:
        """Ask a run's trainer to stop; it saves a checkpoint and the final model, then ends."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            active = self._active.get(run_id)
            queued = self._queued.pop(run_id, None)
            if queued is not None or (active is None and run_dir.is_dir() and self.queue.release_run(run_dir)):
                # Waiting here (or in another studio on this folder): out of line, nothing trained.
                if queued is not None:
                    self.queue.release(queued.queue_entry)
                return self._cancelled(run_id, run_dir)
            if active is None:
                owner = live_owner(run_dir) if run_dir.is_dir() else None
                if owner is not None and stoppable_trainer(owner):
                    # Adopted (an earlier studio, the CLI): a trainer treats SIGTERM as a clean stop.
                    os.kill(owner.pid, signal.SIGTERM)
                    state = self._refreshed(run_id, run_dir)
                    with state.lock:
                        state.stopping = True
                        state.settle()
                    return state
                where = (
                    f" here; it is trained by {owner.describe()}: stop it there"
                    if owner
                    else ", so there is nothing to stop"
                )
                raise RunError(f"Run {run_id} is not running{where}.")
            active.stop_event.set()
            active.state.stopping = True
            return self._refreshed(run_id, run_dir)

    def delete_old_checkpoints(self, run_id: str) -> list[Path]:
        """Free disk space in a run that is not training: all checkpoints but the newest (resume)
        and the best go (trainer.run.retention.delete_old_checkpoints); returns the deleted files."""
        from trainer.run.owner import RunOwnedError
        from trainer.run.retention import delete_old_checkpoints

        run_dir = self.run_dir(run_id)
        with self._lock:
            if run_id in self._active:
                raise RunError(f"Run {run_id} is running; stop it before deleting its old checkpoints.")
            if not run_dir.is_dir():
                raise UnknownRunError(f"There is no run {run_id} in {self.runs_dir}.")
            try:
                return delete_old_checkpoints(run_dir)
            except RunOwnedError as error:
                raise RunError(str(error)) from None

    def annotate(self, run_id: str, name: object, notes: object) -> RunSnapshot:
        """Give a run a name and notes (notes.json in its folder), also while it trains: the
        trainer never reads that file. RunError says what is wrong with bad text."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            state = self._refreshed(run_id, run_dir)  # UnknownRunError for a run that is gone
            try:
                checked = write_run_notes(run_dir, name, notes)
            except ValueError as error:
                raise RunError(str(error)) from None
            with state.lock:
                state.notes = checked
                state.version += 1
            return state.snapshot()

    def delete(self, run_id: str) -> None:
        """Delete a run that is not running, folder and all."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            if run_id in self._active or live_owner(run_dir) is not None:
                raise RunError(f"Run {run_id} is running; stop it before deleting it.")
            queued = self._queued.pop(run_id, None)
            if queued is not None:  # waiting for a slot: out of line, then gone
                self.queue.release(queued.queue_entry)
            elif run_dir.is_dir():
                self.queue.release_run(run_dir)
            if not run_dir.is_dir():
                raise UnknownRunError(f"There is no run {run_id} in {self.runs_dir}.")
            if run_dir.is_symlink():
                run_dir.unlink()
            else:
                shutil.rmtree(run_dir)
            self._followers.pop(run_id, None)

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop every run (each saves its model), waiting up to `timeout` seconds in all. Queued runs
        stay in the run queue for the next studio on this runs folder."""
        with self._lock:
            self._closed = True
            waiting = [queued.queue_entry for queued in self._queued.values()]
            self._queued.clear()
            active = list(self._active.values())
        self.queue.orphan(waiting)
        for run in active:
            run.stop_event.set()
            run.state.stopping = True
        deadline = time.time() + timeout
        for run in active:
            run.process.join(max(0.1, deadline - time.time()))
            if run.process.is_alive():
                run.process.terminate()
                run.process.join(5)
        with self._lock:
            for run in active:
                self._refreshed(run.state.run_id, run.state.run_dir)

    # ---- reading

    def get(self, run_id: str) -> RunSnapshot:
        run_dir = self.run_dir(run_id)
        with self._lock:
            return self._refreshed(run_id, run_dir).snapshot()

    def list_runs(self) -> list[RunSnapshot]:
        """Every run in the runs folder, newest first."""
        with self._lock:
            run_ids = set(self._active) | set(self._queued)
            places = self._places()
            try:
                entries = list(os.scandir(self.runs_dir))
            except OSError:
                entries = []
            for entry in entries:
                if entry.is_dir() and RUN_ID_PATTERN.fullmatch(entry.name) and entry.name not in (".", ".."):
                    folder = Path(entry.path)
                    if (folder / CONFIG_FILE).exists() or (folder / EVENTS_FILE).exists():
                        run_ids.add(entry.name)
            snapshots = []
            for run_id in run_ids:
                try:
                    snapshots.append(self._refreshed(run_id, self.runs_dir / run_id, places).snapshot())
                except UnknownRunError:  # deleted while we looked
                    continue
        return sorted(snapshots, key=lambda s: (s.started_at or 0.0, s.run_id), reverse=True)

    def worker_join(self, run_id: str) -> WorkerJoin | None:
        """Master address and token of a run of this studio that accepts workers, while it runs.
        Only for the page that started or resumed it: never part of a snapshot or the API's runs."""
        with self._lock:
            run = self._active.get(run_id) or self._queued.get(run_id)
            return run.join if run is not None else None

    def active_count(self) -> int:
        with self._lock:
            for run_id, active in list(self._active.items()):
                self._refreshed(run_id, active.state.run_dir)  # notices trainers that have ended
            return len(self._active)

    # ---- internals

    def _refreshed(self, run_id: str, run_dir: Path, places: dict[str, int] | None = None) -> RunState:
        """The run's state with everything its metrics.jsonl holds now. Caller holds self._lock.
        places: the run queue's places (`RunQueue.places`), when the caller has read them already.

        The owner is checked before the file is read: a trainer seen dead has written all it
        ever will, so a run is never taken for interrupted while its `end` is still unread."""
        active = self._active.get(run_id)
        if active is None and not run_dir.is_dir():
            self._followers.pop(run_id, None)
            raise UnknownRunError(f"There is no run {run_id} in {self.runs_dir}.")
        if active is not None:
            owner_alive = active.process.is_alive()
        else:
            owner_alive = live_owner(run_dir) is not None
        follower = self._followers.get(run_id)
        if follower is None:
            follower = self._followers[run_id] = RunFollower(run_id, run_dir)
        if active is None:
            self._note_place(follower.state, places)
        state = follower.refresh(owner_alive)
        if active is not None and not owner_alive:
            self._reap(active)
        return state

    def _reap(self, active: ActiveRun) -> None:
        """The studio's own trainer has exited. Caller holds self._lock."""
        self._active.pop(active.state.run_id, None)
        active.process.join(timeout=5)
        if active.queue_entry is not None:
            self.queue.release(active.queue_entry)  # its slot, for the next in line
        state = active.state
        if state.status == "interrupted":  # it exited without an `end` event
            code = active.process.exitcode
            reason = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            owner = live_owner(state.run_dir)
            taken = f" The run folder is being trained by {owner.describe()}." if owner else ""
            with state.lock:
                state.error_message = (
                    f"The trainer process {reason} before the run ended (out of memory? "
                    f"killed?).{taken} Resume continues from the last checkpoint; the "
                    "studio's terminal shows what the trainer printed."
                )
                state.version += 1

    def _check_disk(self) -> None:
        from trainer.config.checks import ConfigError
        from trainer.config.preflight import check_disk_space

        try:
            check_disk_space(self.runs_dir, "runs folder")
        except ConfigError as error:
            raise RunError(str(error)) from None

    def _check_capacity(self) -> None:
        """Caller holds self._lock."""
        for run_id, active in list(self._active.items()):
            self._refreshed(run_id, active.state.run_dir)  # frees the slots of ended trainers
        held = sorted(self._active) + sorted(self._queued)
        if len(held) >= self.max_concurrent_runs:
            raise RunLimitError(
                f"{len(held)} run(s) are already training or queued ({', '.join(held)}) and this studio "
                f"allows {self.max_concurrent_runs} at a time (--max-concurrent-runs). "
                "Stop one or wait for it to finish, then start again."
            )

    def _new_join(self, config: dict) -> WorkerJoin | None:
        """The address and a new token for a run that accepts workers (`max_nodes` > 1); RunError
        while another of this studio's runs listens there. Caller holds self._lock."""
        if launcher_shape(config)[1] <= 1:
            return None
        master = f"{self.cluster_host}:{self.cluster_port}"
        runs = [*self._active.items(), *self._queued.items()]
        taken = [run_id for run_id, run in runs if run.join and run.join.master == master]
        if taken:
            raise RunError(
                f"Run {taken[0]} already accepts workers on {master}; stop it first, or start the "
                "studio with another --cluster-port."
            )
        return WorkerJoin(master, new_token())
