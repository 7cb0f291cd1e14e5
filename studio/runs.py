"""Training runs as the studio sees them: `RunManager` starts, stops, resumes and deletes them.

Each run's trainer runs in its own process with a stop event, forked from a fork server that has
already imported the trainer (`TRAINER_START_METHOD`). Every run, started here
or found in the runs folder (an earlier studio, the CLI), is followed the same way: a
`RunFollower` (studio/history.py) reads what its metrics.jsonl gained each time the run is
looked at, and one rule (`trainer.run.status.run_status`) gives its state. Browser sessions only
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
import threading
import time
from pathlib import Path

from studio.history import ACTIVE_STATUSES, RESUMABLE_STATUSES, GifInfo, RunFollower, RunSnapshot, RunState  # noqa: F401 - re-exported: the studio's names for a run
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
    start_trainer,
    stoppable_trainer,
    trainer_context,
)
from trainer.cluster.admission import new_token
from trainer.cluster.nodes import DEFAULT_PORT
from trainer.config.permissions import CodePermissionError, require_code_permission
from trainer.run.layout import CONFIG_FILE, EVENTS_FILE, create_run_dir, read_config, write_config
from trainer.run.notes import write_run_notes
from trainer.run.owner import live_owner


class RunManager:
    """Starts, stops, resumes and deletes runs; the one shared state of the studio."""

    def __init__(
        self,
        runs_dir: str | os.PathLike,
        max_concurrent_runs: int = 2,
        target: TrainerTarget | None = None,
        start_method: str = TRAINER_START_METHOD,
        allow_custom_envs: bool = False,
        cluster_host: str = "127.0.0.1",
        cluster_port: int = DEFAULT_PORT,
    ):
        if max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs must be at least 1, got {max_concurrent_runs}")
        self.runs_dir = Path(runs_dir).expanduser().resolve()
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.max_concurrent_runs = max_concurrent_runs
        self.allow_custom_envs = allow_custom_envs  # may a run folder's config name code (resume)?
        # Where a run that accepts workers listens: loopback unless the studio's owner opens it.
        self.cluster_host, self.cluster_port = cluster_host, cluster_port
        self._target = target
        self._context = trainer_context(start_method)
        self._lock = threading.RLock()
        self._active: dict[str, ActiveRun] = {}  # runs whose trainer this studio started
        self._followers: dict[str, RunFollower] = {}  # every run looked at so far

    # ---- paths

    def run_dir(self, run_id: str) -> Path:
        """The folder of run `run_id`; RunError if the id is malformed or escapes the runs folder."""
        run_id = validate_run_id(run_id)
        path = self.runs_dir / run_id
        if not is_inside(path, self.runs_dir) or path.resolve() == self.runs_dir:
            raise RunError(f"{run_id!r} does not name a folder inside the runs folder.")
        return path

    # ---- lifecycle

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
            self._launch(follower.state, resume=False, join=join)
            return follower.state

    def resume(self, run_id: str) -> RunState:
        """Continue a stopped, failed or interrupted run from its last checkpoint."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            if run_id in self._active:
                raise RunError(f"Run {run_id} is still running; there is nothing to resume.")
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
            self._launch(state, resume=True, join=join)
            return state

    def stop(self, run_id: str) -> RunState:
        """Ask a run's trainer to stop; it saves a checkpoint and the final model, then ends."""
        run_dir = self.run_dir(run_id)
        with self._lock:
            active = self._active.get(run_id)
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
            if not run_dir.is_dir():
                raise UnknownRunError(f"There is no run {run_id} in {self.runs_dir}.")
            if run_dir.is_symlink():
                run_dir.unlink()
            else:
                shutil.rmtree(run_dir)
            self._followers.pop(run_id, None)

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop every run (each saves its model), waiting up to `timeout` seconds in all."""
        with self._lock:
            active = list(self._active.values())
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
            run_ids = set(self._active)
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
                    snapshots.append(self._refreshed(run_id, self.runs_dir / run_id).snapshot())
                except UnknownRunError:  # deleted while we looked
                    continue
        return sorted(snapshots, key=lambda s: (s.started_at or 0.0, s.run_id), reverse=True)

    def worker_join(self, run_id: str) -> WorkerJoin | None:
        """Master address and token of a run of this studio that accepts workers, while it runs.
        Only for the page that started or resumed it: never part of a snapshot or the API's runs."""
        with self._lock:
            active = self._active.get(run_id)
            return active.join if active is not None else None

    def active_count(self) -> int:
        with self._lock:
            for run_id, active in list(self._active.items()):
                self._refreshed(run_id, active.state.run_dir)  # notices trainers that have ended
            return len(self._active)

    # ---- internals

    def _refreshed(self, run_id: str, run_dir: Path) -> RunState:
        """The run's state with everything its metrics.jsonl holds now. Caller holds self._lock.

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
        state = follower.refresh(owner_alive)
        if active is not None and not owner_alive:
            self._reap(active)
        return state

    def _reap(self, active: ActiveRun) -> None:
        """The studio's own trainer has exited. Caller holds self._lock."""
        self._active.pop(active.state.run_id, None)
        active.process.join(timeout=5)
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
        if len(self._active) >= self.max_concurrent_runs:
            running = ", ".join(sorted(self._active))
            raise RunLimitError(
                f"{len(self._active)} run(s) are already training ({running}) and this studio "
                f"allows {self.max_concurrent_runs} at a time (--max-concurrent-runs). "
                "Stop one or wait for it to finish, then start again."
            )

    def _new_join(self, config: dict) -> WorkerJoin | None:
        """The address and a new token for a run that accepts workers (`max_nodes` > 1); RunError
        while another of this studio's runs listens there. Caller holds self._lock."""
        if launcher_shape(config)[1] <= 1:
            return None
        master = f"{self.cluster_host}:{self.cluster_port}"
        taken = [run_id for run_id, active in self._active.items() if active.join and active.join.master == master]
        if taken:
            raise RunError(
                f"Run {taken[0]} already accepts workers on {master}; stop it first, or start the "
                "studio with another --cluster-port."
            )
        return WorkerJoin(master, new_token())

    def _launch(self, state: RunState, resume: bool, join: WorkerJoin | None = None) -> None:
        """Caller holds self._lock. Starts the run's trainer process (studio/trainer_process.py)."""
        self._active[state.run_id] = start_trainer(
            self._context,
            state,
            resume,
            join,
            self._target,
            self.cluster_host,
            self.cluster_port,
            self.allow_custom_envs,
        )
