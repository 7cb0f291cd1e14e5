"""The sweeps the studio runs: each `python -m trainer sweep` in a process of its own, in its
sweep's folder (the sweep file and its base beside the study), its output appended to sweep.log.

    jobs = SweepJobs(runs_dir, slots=2)     # slots: the studio's run queue's (its --slots)
    jobs.start(folder, trials=20, jobs=2)   # also what continues a stopped sweep: the same command
    jobs.stop(name)                          # SIGTERM: the running trials save, stop and are requeued

A sweep outlives nothing: the studio stops its sweeps when it exits (as Ctrl-C would). No gradio.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainer.run.layout import SWEEP_FILE, SWEEP_LOG_FILE

STOP_WAIT_SECONDS = 60.0  # at the studio's exit, how long the sweeps get to save and stop
ROOT = Path(__file__).resolve().parents[1]  # where `python -m trainer` is found


class SweepError(RuntimeError):
    """A sweep the studio cannot start or stop (message for people)."""


class SweepJobs:
    def __init__(self, runs_dir: str | Path, slots: int | None = None):
        self.runs_dir = Path(runs_dir).resolve()
        self.slots = slots  # passed on as --slots: the sweep counts the studio's slots, not the default
        self._processes: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def running(self, name: str) -> bool:
        with self._lock:
            process = self._processes.get(name)
            return process is not None and process.poll() is None

    def exit_code(self, name: str) -> int | None:
        """How the studio's last sweep of `name` ended (None: running, or never started here)."""
        with self._lock:
            process = self._processes.get(name)
            return None if process is None else process.poll()

    def start(self, folder: Path, trials: int, jobs: int) -> None:
        """Run (or continue) the sweep in `folder` up to `trials` trials, `jobs` at once."""
        name = folder.name
        if not (folder / SWEEP_FILE).is_file():
            raise SweepError(
                f"{name} was not started from the studio (it has no {SWEEP_FILE}): continue it with the "
                f"command that started it (docs/sweeps.md)"
            )
        for label, number in (("trials", trials), ("jobs", jobs)):
            if not isinstance(number, int) or number < 1:
                raise SweepError(f"{label} must be a whole number of at least 1, got {number!r}")
        with self._lock:
            process = self._processes.get(name)
            if process is not None and process.poll() is None:
                raise SweepError(f"{name} is running already: stop it first")
            command = [sys.executable, "-m", "trainer", "sweep", "--space", SWEEP_FILE, "--name", name]
            command += ["--trials", str(trials), "--jobs", str(jobs), "--runs-dir", str(self.runs_dir)]
            command += [] if self.slots is None else ["--slots", str(self.slots)]
            path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
            environment = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
            with open(folder / SWEEP_LOG_FILE, "ab") as log:
                log.write(f"$ python -m trainer sweep --trials {trials} --jobs {jobs} ({time.ctime()})\n".encode())
                log.flush()
                self._processes[name] = subprocess.Popen(
                    command, cwd=folder, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment
                )

    def stop(self, name: str) -> None:
        """Ask the sweep to stop (SIGTERM): its running trials save, stop and are requeued."""
        with self._lock:
            process = self._processes.get(name)
            if process is None or process.poll() is not None:
                raise SweepError(f"{name} is not running in this studio")
            process.send_signal(signal.SIGTERM)

    def stop_all(self) -> None:
        """Stop every running sweep and wait for them (the studio exits)."""
        with self._lock:
            running = [process for process in self._processes.values() if process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
