"""The sweep's loop: ask the study for trials, train `--jobs` of them at once (each seed of a
trial in its own process, the CPU cores shared out as torch threads), report each update's metric
to the pruner, and tell the study how each trial ended. A trial takes one slot per seed from the
runs folder's run queue (trainer/run/run_queue.py) before it starts, so the sweep, other sweeps
and a studio on the same runs folder never train more runs at once than `--slots`.

    runner = SweepRunner(sweep, study, storage, folder, target=40, jobs=2, seeds=1, runs_dir="runs")
    runner.run()     # "done", or "stopped" after Ctrl-C / SIGTERM (the running trials requeued)

Its lines, one per event of a trial: started, pruned at step N, finished with its value, failed
with the reason, interrupted. Requeued trials (trainer/sweep/study.py) resume their run folders.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optuna.exceptions import UpdateFinishedTrialError

from trainer.config.checks import ConfigError
from trainer.run.layout import trial_run_path
from trainer.run.run_queue import SWEEP, RunQueue
from trainer.run.status import queued_text
from trainer.sweep import study as book
from trainer.sweep.objective import TrialCurve, run_trial_seed
from trainer.sweep.space import Sweep

START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
PRELOAD = ["trainer.sweep.objective", "trainer.run.loop"]  # the fork server imports torch once


@dataclass
class ActiveTrial:
    trial: Any  # optuna.trial.Trial
    run_dirs: list[Path]
    curve: TrialCurve
    stop: Any  # the trial's stop event (pruned, or the sweep stops)
    processes: list = field(default_factory=list)
    acked: list = field(default_factory=list)  # per seed: the last update the sweep answered
    steps: list = field(default_factory=list)  # per seed: the step of its latest update
    waiting: dict = field(default_factory=dict)  # seed index -> (seq, step) of its unanswered update
    ends: dict = field(default_factory=dict)  # seed index -> end status
    errors: list = field(default_factory=list)
    told: bool = False  # the study knows how it ended (pruned), or another worker took it over
    started: float = field(default_factory=time.monotonic)
    slot: str | None = None  # its entry in the run queue, released when its runs have ended


class SweepRunner:
    def __init__(
        self,
        sweep: Sweep,
        study: Any,
        storage: Any,
        folder: Path,
        target: int,
        jobs: int,
        seeds: int,
        runs_dir: str | Path = "runs",
        slots: int | None = None,
    ):
        self.sweep, self.study, self.storage, self.folder = sweep, study, storage, folder
        self.target, self.jobs, self.seeds = target, jobs, seeds
        self.context = multiprocessing.get_context(START_METHOD)
        if START_METHOD == "forkserver":
            self.context.set_forkserver_preload(PRELOAD)
        self.events = self.context.Queue()
        self.active: dict[int, ActiveTrial] = {}
        self.stopping: str | None = None
        self.wanted = True  # more trials may start (False once --trials are asked for)
        self.last_heartbeat = time.monotonic()
        from envs.cores import available_cores

        self.cores = available_cores()
        self.queue = RunQueue(runs_dir, slots)  # shared with the studio and other sweeps on runs_dir
        # each run's share of the cores: of the runs this sweep trains at once
        self.threads = max(1, self.cores // min(jobs * seeds, max(seeds, self.queue.slots)))
        self.ticket: str | None = None  # the next trial's entry in the run queue (waiting, or admitted)
        self.place: int | None = None  # its place in line, as last printed

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> str:
        previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        for number in previous:
            signal.signal(number, self._on_signal)
        try:
            self._requeue_orphans()
            print(
                f"sweep {self.study.study_name}: {book.tally(self.study, self.target)}, {self.jobs} at once, "
                f"{self.sweep.objective.direction} {self.sweep.objective.metric} ({self.sweep.objective.mode}); "
                f"folder {self.folder}",
                flush=True,
            )
            while True:
                while not self.stopping and self.wanted and len(self.active) < self.jobs:
                    self.wanted = book.more_wanted(self.study, self.target)
                    if not self.wanted or not self._take_slot():
                        break  # queued: it asks again on the next turn
                    self.wanted = self._start_next()
                if self.ticket is not None and (self.stopping or not self.wanted):
                    self._leave_queue()
                queued = self.ticket is not None
                if not self.active and not queued and not (self.wanted or self.stopping):
                    if self._requeue_orphans(settle=True):
                        continue  # a trial asked by a worker that died before it claimed it: run it here
                if not self.active and not queued:
                    return "stopped" if self.stopping else "done"
                self._pump(timeout=0.2)
                self._reap()
                self._heartbeat()
        finally:
            self._leave_queue()
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _take_slot(self) -> bool:
        """The next trial's slots (one per seed) from the run queue: True once it holds them; else it
        waits in line, and says so when its place changes."""
        if self.ticket is None:
            self.ticket = self.queue.join(f"sweep {self.study.study_name}", self.seeds, SWEEP)
        if self.queue.admit(self.ticket):
            self.place = None
            return True
        place = self.queue.place(self.ticket)
        if place != self.place:
            self.place = place
            taken = f"{self.queue.busy()} of {self.queue.slots} slots taken (--slots)"
            print(f"next trial {queued_text(place)}: {taken}", flush=True)
        return False

    def _leave_queue(self) -> None:
        if self.ticket is not None:
            self.queue.release(self.ticket)
            self.ticket = self.place = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stopping and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: abort now (the runs stop themselves)
        self.stopping = signal.Signals(signum).name
        print("stopping: the running trials save and stop; run the same command again to continue", flush=True)
        for active in self.active.values():
            active.stop.set()

    def _start_next(self) -> bool:
        """Ask the study for a trial and start its runs; False when no more should start."""
        if self.stopping:
            return False
        trial = self.study.ask()
        retry_of = trial.user_attrs.get("retry_of")
        if retry_of is None and book.is_surplus(self.study, trial.number, self.target):  # its slot stays for the next
            self.storage.set_trial_system_attr(
                book.trial_id(self.study, self.storage, trial.number), book.SURPLUS, True
            )
            book.fail(self.study, trial, "asked past --trials while another worker asked too")
            return False
        book.claim(self.storage, book.trial_id(self.study, self.storage, trial.number))
        params = {param.name: param.suggest(trial) for param in self.sweep.params}
        shown = book.describe(params, self.sweep.params)
        try:
            config = self.sweep.trial_config(params)
        except ConfigError as error:
            book.fail(self.study, trial, f"the sampled config is invalid: {error}")
            print(f"trial {trial.number} failed: the sampled config is invalid: {error} ({shown})", flush=True)
            return True
        self.storage.set_trial_system_attr(
            book.trial_id(self.study, self.storage, trial.number), book.CONFIG, config.to_dict()
        )
        given = trial.user_attrs.get("run_dirs")
        run_dirs = (
            [self.folder / path for path in given]
            if given
            else [trial_run_path(self.folder, trial.number, config.seed + index) for index in range(self.seeds)]
        )
        trial.set_user_attr("run_dirs", [str(path.relative_to(self.folder)) for path in run_dirs])
        curve = TrialCurve(self.seeds, config.total_timesteps, self.sweep.reports)
        active = ActiveTrial(trial, run_dirs, curve, self.context.Event())
        for index, run_dir in enumerate(run_dirs):
            run_dir.mkdir(parents=True, exist_ok=True)
            # What a run would take alone (torch_threads 0: 1 for an MLP, the cores for a CNN, as
            # trainer/run/setup.py set_threads), at most its share; no GIFs, which only slow a trial.
            alone = config.torch_threads or (self.cores if config.model_type == "ppo-cnn" else 1)
            threads = min(alone, self.threads)
            runtime = config.to_dict() | {"seed": config.seed + index, "torch_threads": threads, "gif_interval": 0}
            acked = self.context.Value("q", 0)
            process = self.context.Process(
                target=run_trial_seed,
                args=(
                    runtime,
                    str(run_dir),
                    (trial.number, index),
                    self.sweep.objective.metric,
                    self.events,
                    active.stop,
                    acked,
                ),
                name=f"sweep-trial-{trial.number}-{index}",
            )
            process.start()
            active.processes.append(process)
            active.acked.append(acked)
            active.steps.append(0)
        self.queue.hand_over(self.ticket, [process.pid for process in active.processes])
        active.slot, self.ticket = self.ticket, None  # held by the trial's runs while any of them lives
        self.active[trial.number] = active
        if self.stopping:  # the signal came while it started
            active.stop.set()
        again = f" (again: trial {retry_of} was interrupted)" if retry_of is not None else ""
        print(f"trial {trial.number} started{again}: {shown} -> {run_dirs[0]}", flush=True)
        return True

    def _pump(self, timeout: float) -> None:
        """Handle the runs' events until none is waiting (the first wait up to `timeout`)."""
        try:
            message = self.events.get(timeout=timeout)
            while True:
                self._handle(*message)
                message = self.events.get_nowait()
        except queue.Empty:
            return

    def _handle(self, tag: tuple, seq: int, event: dict) -> None:
        from optuna.trial import TrialState

        number, index = tag
        active = self.active.get(number)
        if active is None:
            return
        kind = event["type"]
        if kind == "end":
            active.ends[index] = event["status"]
        elif kind == "error":
            active.errors.append(event["message"])
        elif kind == "metrics":
            try:
                for point, mean, step in active.curve.add(index, event["step"], event["value"]):
                    if active.told:
                        break
                    active.trial.report(mean, point)
                    if active.trial.should_prune():
                        active.stop.set()
                        self.study.tell(active.trial, state=TrialState.PRUNED)
                        active.told = True
                        metric = self.sweep.objective.metric
                        print(f"trial {number} pruned at step {step}: {metric} {mean:.4g}", flush=True)
            except UpdateFinishedTrialError:  # another worker requeued it (it thought this one gone)
                active.told = True
                active.stop.set()
            active.steps[index] = max(active.steps[index], event["step"])
            if seq:
                active.waiting[index] = (seq, event["step"])
        self._answer(active)

    def _answer(self, active: ActiveTrial) -> None:
        """Let the runs go on past the updates decided on: a seed's update once every seed still
        running has reached its step (the point they report together), so no seed runs ahead of
        a prune; the runs of a trial move in step, each at most one update past the answer."""
        running = [
            step
            for index, step in enumerate(active.steps)
            if index not in active.ends and active.processes[index].is_alive()
        ]
        slowest = min(running, default=float("inf"))
        for index, (seq, step) in list(active.waiting.items()):
            if step <= slowest:
                active.acked[index].value = seq
                del active.waiting[index]

    def _reap(self) -> None:
        """Finish the trials whose runs have all ended."""
        for number, active in list(self.active.items()):
            if any(process.is_alive() for process in active.processes):
                self._answer(active)  # a seed that died without a word holds no other back
                continue
            self._pump(timeout=0.0)  # the last events of the ended runs
            for process in active.processes:
                process.join()
            del self.active[number]
            if active.slot is not None:
                self.queue.release(active.slot)
            if not active.told:
                try:
                    self._tell(active)
                except UpdateFinishedTrialError:  # requeued by a worker that thought this one gone
                    print(f"trial {number} was taken over by another sweep worker", flush=True)

    def _tell(self, active: ActiveTrial) -> None:
        number, metric = active.trial.number, self.sweep.objective.metric
        statuses = [active.ends.get(index) for index in range(len(active.processes))]
        if self.stopping and "failed" not in statuses and statuses != ["finished"] * len(statuses):
            frozen = self.storage.get_trial(book.trial_id(self.study, self.storage, number))
            book.requeue(self.study, self.storage, frozen, f"the sweep stopped ({self.stopping})")
            print(
                f"trial {number} interrupted at step {active.curve.last_step}: it resumes when the sweep continues",
                flush=True,
            )
            return
        if any(status != "finished" for status in statuses):
            codes = [process.exitcode for process in active.processes]
            reason = active.errors[0] if active.errors else f"a run ended without finishing (exit codes {codes})"
            book.fail(self.study, active.trial, reason)
            print(f"trial {number} failed: {reason} (see {active.run_dirs[0]})", flush=True)
            return
        value = active.curve.value(self.sweep.objective.mode, self.sweep.objective.direction)
        if value is None:
            reason = f"{metric} never had a value (no episode finished in {active.curve.last_step} steps?)"
            book.fail(self.study, active.trial, reason)
            print(f"trial {number} failed: {reason}", flush=True)
            return
        self.study.tell(active.trial, value)
        seconds = time.monotonic() - active.started
        print(f"trial {number} finished: {metric} {value:.4g} in {seconds:.1f} s ({self._best_words()})", flush=True)

    def _best_words(self) -> str:
        try:
            best = self.study.best_trial
        except ValueError:
            return "no best yet"
        return f"best so far: trial {best.number}, {best.value:.4g}"

    def _requeue_orphans(self, settle: bool = False) -> bool:
        """Requeue the trials whose worker is gone; True if any was. settle: first wait out the
        trials asked but not yet claimed (book.UNCLAIMED_SECONDS), which may be a dead worker's."""
        while settle and book.unclaimed(self.study):
            time.sleep(0.5)
        requeued = False
        for trial in book.orphans(self.study):
            if book.requeue(self.study, self.storage, trial, "its sweep process is gone"):
                self.wanted = requeued = True
                print(f"trial {trial.number} was interrupted (its sweep process is gone): requeued", flush=True)
        return requeued

    def _heartbeat(self) -> None:
        if time.monotonic() - self.last_heartbeat < book.HEARTBEAT_SECONDS:
            return
        self.last_heartbeat = time.monotonic()
        for number, active in self.active.items():
            try:
                if not active.told:
                    self.storage.set_trial_system_attr(
                        book.trial_id(self.study, self.storage, number), book.HEARTBEAT, time.time()
                    )
            except UpdateFinishedTrialError:  # another worker took it over: its runs stop
                active.told = True
                active.stop.set()
        self._requeue_orphans()  # a worker on another host that stopped beating
