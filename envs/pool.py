"""A shared-memory worker pool for Python (Gymnasium) envs: `num_workers` processes, each
stepping its own slice of the `num_envs` copies in a loop.

Gymnasium's `AsyncVectorEnv` starts one process per env and pickles every step's results
through a pipe; here the actions, observations, rewards and done flags live in shared memory
(`multiprocessing.RawArray`, one block per array), and a step is one wake-up each way per
worker (`envs/doorbell.py`: a counter in shared memory that the other side spins on for a moment, then
a semaphore to sleep on), so a step costs microseconds of signalling rather than a scheduler
round trip. A worker auto-resets a finished env itself, keeping the observation the episode
ended on in `final_obs`, so the learner never waits for a second round trip. This module is the
learner's side; what runs in a worker (and in mode `sync`, in the learner) is envs/pool_worker.py.

`WorkerPool` speaks numpy, like a Gymnasium vector env; `envs.gym_vec.GymVecEnv` (modes
`pool` and `async_pool`) puts it behind the `VecEnv` protocol with the conversions, scores
and statistics every Gymnasium env gets. The asynchronous mode splits the workers into two
groups (`send(group, actions)` / `recv(group)`), so one half of the envs steps while the
policy acts on the other (`VecEnv.step_groups`, which trainer/algos/rollout.py steps by).

Faults end the run, never hang it: an exception in the env's code comes back with its own
traceback and the worker's number; a worker that dies (a segfault) or whose step outlives
`step_timeout` seconds is reported with the stack Python's faulthandler dumped for it. Workers
exit when the process that made them dies, even by SIGKILL (a watchdog thread, and on Linux
PR_SET_PDEATHSIG).

Seeding: `reset(seed)` seeds env i with `seed + i`, as Gymnasium's vector envs do, so the
trajectories depend on the seed only, not on how many workers share the envs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import cloudpickle
import numpy as np

from envs.cores import available_cores
from envs.doorbell import SPIN_S
from envs.errors import EnvConfigError, EnvError
from envs.pool_worker import CLOSE, FAILED, RENDER, RESET, STEP, Shared, worker_main

# How often a waiting learner checks that its workers are still alive (seconds).
_LIVENESS_POLL_S = 0.2
DEFAULT_STEP_TIMEOUT_S = 60.0


class EnvWorkerError(EnvError):
    """A pool worker raised, died or hung; the message names the worker, its envs and the cause."""


def _split(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _pickled_env_fn(env_fn: Callable) -> bytes:
    """`env_fn` as the workers receive it (cloudpickle: lambdas and closures travel by value),
    or an error that says what to change."""
    try:
        return cloudpickle.dumps(env_fn)
    except Exception as error:  # noqa: BLE001 - pickling raises many types (TypeError, PicklingError...)
        raise EnvConfigError(
            f"the env factory cannot be sent to the pool's worker processes: it could not be pickled "
            f"({type(error).__name__}: {error}). Make it a function (or functools.partial) whose arguments "
            f"pickle, creating what it needs (files, locks, sockets, windows) inside it, or step the envs in "
            f"this process (num_workers: 1 or vector_env: sync)"
        ) from error


class WorkerPool:
    """`num_envs` copies of `env_fn()` stepped by `num_workers` processes over shared memory.

    env_fn: a picklable (by cloudpickle) function returning one `gymnasium.Env`.
    obs_shape / action_shape / action_dtype: of one env (observations are stored as float32).
    groups: 1 (every step waits for all workers) or 2 (`send` / `recv` per half, for overlap).
    mask_size: Discrete actions: n, so that the envs' `info["action_mask"]` reach `shared.action_mask`.
    """

    def __init__(
        self,
        env_fn: Callable,
        num_envs: int,
        num_workers: int,
        obs_shape: tuple,
        action_shape: tuple,
        action_dtype: np.dtype,
        groups: int = 1,
        step_timeout: float = DEFAULT_STEP_TIMEOUT_S,
        context: str | None = None,
        mask_size: int = 0,
    ):
        if groups not in (1, 2):
            raise EnvConfigError(f"a worker pool steps its envs in 1 or 2 groups, got {groups!r}")
        num_workers = max(groups, min(num_workers, num_envs))
        if num_envs < groups:
            raise EnvConfigError(f"the asynchronous pool needs at least 2 envs, got num_envs={num_envs}")
        self.num_envs, self.num_workers, self.step_timeout = num_envs, num_workers, float(step_timeout)
        self.slices = _split(num_envs, num_workers)
        # Workers of group g: a contiguous run, so each group's envs are one slice of the batch.
        worker_groups = np.array_split(np.arange(num_workers), groups)
        self.group_workers = [list(map(int, workers)) for workers in worker_groups]
        self.group_envs = [slice(self.slices[w[0]][0], self.slices[w[-1]][1]) for w in self.group_workers]
        spec_args = (num_envs, tuple(obs_shape), tuple(action_shape), np.dtype(action_dtype), num_workers, mask_size)
        self.shared = Shared(*spec_args)
        self._closed = False
        self._in_flight = [False] * groups
        self._processes: list = []
        # fork is the cheap start (no re-import); threads of the learner are not copied, and a
        # worker touches only numpy and the user's env
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context(context or ("fork" if "fork" in methods else "spawn"))
        payload = _pickled_env_fn(env_fn)
        semaphores = [(ctx.Semaphore(0), ctx.Semaphore(0)) for _ in range(num_workers)]
        # The learner spins for its workers only on a core of its own: spinning on one that a
        # worker needs slows the very step it waits for (measured under PPO, 2 workers on 2 cores, 64 envs:
        # a step took 1.2 ms instead of 0.9).
        learner_spin = SPIN_S if num_workers < available_cores() else 0.0
        self._go, self._done = zip(
            *(self.shared.doorbells(w, *pair, learner_spin=learner_spin) for w, pair in enumerate(semaphores))
        )
        self._commands = [1] * num_workers  # commands sent to each worker; building its envs is the first
        self._errors, self._fault_paths = [], []
        pdeathsig = threading.current_thread() is threading.main_thread()
        for index, (lo, hi) in enumerate(self.slices):
            receive, send = ctx.Pipe(duplex=False)
            handle, fault_path = tempfile.mkstemp(prefix=f"rlstudio-pool-worker{index}-", suffix=".txt")
            os.close(handle)
            process = ctx.Process(
                target=worker_main,
                name=f"rlstudio-pool-worker-{index}",
                daemon=True,
                args=(
                    index,
                    lo,
                    hi,
                    payload,
                    spec_args,
                    self.shared.raw,
                    *semaphores[index],
                    send,
                    fault_path,
                    os.getpid(),
                    pdeathsig,
                ),
            )
            process.start()
            send.close()
            self._processes.append(process)
            self._errors.append(receive)
            self._fault_paths.append(fault_path)
        self._wait(range(num_workers), "building the env")

    # Commands --------------------------------------------------------------------------------

    def _signal(self, workers: Sequence[int], command: int) -> None:
        self._check_open()
        for worker in workers:
            self.shared.command[worker] = command
        for worker in workers:
            self._commands[worker] += 1
            self._go[worker].ring(self._commands[worker])

    def _wait(self, workers: Sequence[int], what: str) -> None:
        deadline = time.monotonic() + self.step_timeout
        for worker in workers:
            while not self._done[worker].wait(self._commands[worker], timeout=_LIVENESS_POLL_S):
                process = self._processes[worker]
                if not process.is_alive():
                    self._fail(worker, what, self._death_message(process))
                if time.monotonic() > deadline:
                    self._fail(worker, what, self._hang_message(process))
            if self.shared.status[worker] == FAILED:
                failed_at, trace = self._errors[worker].recv()
                self._fail(worker, failed_at, f"the env raised:\n{trace}")

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start every env (env i seeded with seed + i); returns the (N, *obs) observations."""
        self._finish_in_flight()
        self.shared.seeds[:] = -1 if seed is None else np.arange(seed, seed + self.num_envs)
        self._signal(range(self.num_workers), RESET)
        self._wait(range(self.num_workers), "reset")
        return self.shared.obs

    def step(self, actions: np.ndarray) -> None:
        """Step every env; the results are in `shared` (obs, final_obs, reward, ...)."""
        self._finish_in_flight()
        self.shared.actions[:] = actions
        self._signal(range(self.num_workers), STEP)
        self._wait(range(self.num_workers), "step")

    def send(self, group: int, actions: np.ndarray) -> None:
        """Start a step of `group`'s envs (`group_envs[group]`) with their actions, not waiting."""
        if self._in_flight[group]:
            raise EnvError(f"group {group} of the pool is already stepping; recv({group}) first")
        self.shared.actions[self.group_envs[group]] = actions
        self._signal(self.group_workers[group], STEP)
        self._in_flight[group] = True

    def recv(self, group: int) -> None:
        """Wait for `group`'s step; its results are then in `shared` at `group_envs[group]`."""
        if not self._in_flight[group]:
            raise EnvError(f"group {group} of the pool is not stepping; send({group}, actions) first")
        self._in_flight[group] = False
        self._wait(self.group_workers[group], "step")

    def _finish_in_flight(self) -> None:
        for group, in_flight in enumerate(self._in_flight):
            if in_flight:
                self.recv(group)

    def render(self, index: int):
        self._finish_in_flight()
        worker = next(w for w, (lo, hi) in enumerate(self.slices) if lo <= index < hi)
        self.shared.arg[worker] = index
        self._signal([worker], RENDER)
        self._wait([worker], "render")
        _, frame = self._errors[worker].recv()
        return frame

    # Faults ----------------------------------------------------------------------------------

    def _fault_dump(self, worker: int) -> str:
        try:
            with open(self._fault_paths[worker]) as handle:
                return handle.read().strip()
        except OSError:
            return ""

    def _death_message(self, process) -> str:
        code = process.exitcode
        cause = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        dump = self._fault_dump(self._processes.index(process))
        return f"the worker process died ({cause}).{' Its stack:' + chr(10) + dump if dump else ''}"

    def _hang_message(self, process) -> str:
        worker = self._processes.index(process)
        try:  # ask faulthandler in the worker where it is stuck, then give it a moment to write
            os.kill(process.pid, signal.SIGUSR1)
            time.sleep(0.3)
        except OSError:
            pass
        dump = self._fault_dump(worker)
        return (
            f"no answer within step_timeout={self.step_timeout:g} s (the env's code hangs, or is slower "
            f"than that: raise step_timeout).{' Where it was:' + chr(10) + dump if dump else ''}"
        )

    def _fail(self, worker: int, what: str, detail: str) -> None:
        lo, hi = self.slices[worker]
        self.close(force=True)
        raise EnvWorkerError(f"pool worker {worker} (envs {lo}..{hi - 1}) failed during {what}: {detail}")

    # Lifetime --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EnvError("this worker pool is closed (after close() or a worker's failure); make a new env")

    def close(self, force: bool = False) -> None:
        """Stop the workers (politely unless `force` or something failed) and free their files."""
        if self._closed:
            return
        if not force and all(p.is_alive() for p in self._processes) and not any(self._in_flight):
            workers = range(self.num_workers)
            self._signal(workers, CLOSE)
            for worker in workers:
                self._done[worker].wait(self._commands[worker], timeout=5.0)
        self._closed = True
        for process in self._processes:
            process.join(timeout=1.0 if not force else 0.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=5.0)
        for connection in self._errors:
            connection.close()
        for path in self._fault_paths:
            try:
                os.unlink(path)
            except OSError:
                pass

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def __del__(self):
        try:
            self.close(force=True)
        except Exception:  # interpreter shutdown
            pass
