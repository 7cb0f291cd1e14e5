"""The worker side of the shared-memory pool (envs/pool.py): the shared arrays (`Shared`), the loop
each worker process runs (`worker_main`), the stepping of a slice of envs into the arrays
(`EnvSlice`, also used in the trainer's own process by `LocalEnvs`, mode `sync`), and the one
rule for an episode's score (`episode_scores`)."""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

import cloudpickle
import numpy as np

from envs.doorbell import SPIN_S, Doorbell

# Commands a worker reads from the shared `command` slot when woken.
STEP, RESET, RENDER, CLOSE = 1, 2, 3, 4
OK, FAILED = 0, 1


class Shared:
    """The numpy views of the pool's shared arrays (created by the learner, inherited by workers)."""

    def __init__(
        self,
        num_envs: int,
        obs_shape: tuple,
        action_shape: tuple,
        action_dtype: np.dtype,
        num_workers: int,
        mask_size: int = 0,
        raw: dict | None = None,
    ):
        self.specs = {
            "obs": ((num_envs, *obs_shape), np.float32),
            "final_obs": ((num_envs, *obs_shape), np.float32),
            "actions": ((num_envs, *action_shape), np.dtype(action_dtype)),
            # What the learner hands on as it is (float32, as the trainer's tensors): each step's
            # reward, end flags, and the episode's score so far (`episode_scores`).
            "reward": ((num_envs,), np.float32),
            "terminated": ((num_envs,), np.bool_),
            "truncated": ((num_envs,), np.bool_),
            "done": ((num_envs,), np.float32),  # terminated | truncated, as 0.0 / 1.0 (the statistics multiply by it)
            "score": ((num_envs,), np.float32),
            # Discrete actions: the allowed actions of each env's current observation (its
            # info["action_mask"]; all True for an env that reports none), and which envs report one.
            "action_mask": ((num_envs, mask_size), np.bool_),
            "mask_reported": ((num_envs,), np.bool_),
            "seeds": ((num_envs,), np.int64),  # -1: reset without a seed
            "command": ((num_workers,), np.int32),
            # `Doorbell`s: learner -> worker (a command is waiting) and worker -> learner (done)
            "go_count": ((num_workers,), np.int64),
            "go_sleeping": ((num_workers,), np.int32),
            "done_count": ((num_workers,), np.int64),
            "done_sleeping": ((num_workers,), np.int32),
            "status": ((num_workers,), np.int32),
            "arg": ((num_workers,), np.int64),  # the env index of a render command
        }
        if raw == {}:  # one process (LocalEnvs): plain arrays
            for name, (shape, dtype) in self.specs.items():
                setattr(self, name, np.zeros(shape, dtype=dtype))
            self.raw = raw
            return
        self.raw = (
            raw
            if raw is not None
            else {
                name: multiprocessing.RawArray(ctypes.c_byte, max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize))
                for name, (shape, dtype) in self.specs.items()
            }
        )
        for name, (shape, dtype) in self.specs.items():
            count = int(np.prod(shape))
            setattr(self, name, np.frombuffer(self.raw[name], dtype=dtype, count=count).reshape(shape))

    def doorbells(
        self, worker: int, go_semaphore, done_semaphore, learner_spin: float = SPIN_S
    ) -> tuple[Doorbell, Doorbell]:
        """Worker `worker`'s two doorbells: (go: learner -> worker, done: worker -> learner)."""
        return (
            Doorbell(self.go_count, self.go_sleeping, worker, go_semaphore),
            Doorbell(self.done_count, self.done_sleeping, worker, done_semaphore, spin=learner_spin),
        )


def episode_scores(
    running: np.ndarray, reward: np.ndarray, done: np.ndarray, env_score: np.ndarray, has_score: np.ndarray
) -> np.ndarray:
    """Each env's score after a step: the game's own `info["score"]` where the env reported one,
    else the return of the episode so far. `running` (float64, one per env) holds those returns:
    this step's reward is added, and finished episodes restart from 0. The one rule for every
    Gymnasium vectoriser (the pool's workers and envs.gym_vec for Gymnasium's own)."""
    running += reward
    score = np.where(has_score, env_score, running)
    running[done] = 0.0
    return score


def write_action_mask(out: np.ndarray, info: dict | None, index: int) -> bool:
    """Copy an env's `info["action_mask"]` (n values, True or 1 where the action is allowed) into
    `out[index]`: True if it reported one; without one the row allows every action. The one rule
    for every Gymnasium vectoriser (the pool's workers and envs.gym_vec for Gymnasium's own)."""
    mask = info.get("action_mask") if info else None
    if mask is None:
        out[index] = True
        return False
    mask = np.asarray(mask)
    if mask.shape != out.shape[1:]:
        raise ValueError(
            f"info['action_mask'] must hold one flag per action, shape {out.shape[1:]}, got shape {mask.shape}"
        )
    out[index] = mask.astype(np.bool_, copy=False)
    return True


def copy_vector_masks(out: np.ndarray, info: dict) -> bool:
    """Gymnasium's own vector env: its envs' `info["action_mask"]` (where `info["_action_mask"]`
    says an env reported one) into `out` (N, n); True if any did."""
    if not out.shape[1] or "action_mask" not in info:
        return False
    reported = np.asarray(info.get("_action_mask", np.ones(len(out), dtype=bool)), dtype=bool)
    for index in np.flatnonzero(reported):
        write_action_mask(out, {"action_mask": info["action_mask"][index]}, int(index))
    return bool(reported.any())


def _die_with_parent(parent_pid: int, pdeathsig: bool) -> None:
    if pdeathsig and sys.platform.startswith("linux"):
        try:  # the kernel kills us when the creating thread's process dies, even by SIGKILL
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch() -> None:  # also covers macOS and pools made in a thread other than the main one
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, name="pool-watchdog", daemon=True).start()


def worker_main(
    index: int,
    lo: int,
    hi: int,
    payload: bytes,
    spec_args: tuple,
    raw: dict,
    go_semaphore,
    done_semaphore,
    error_conn,
    fault_path: str,
    parent_pid: int,
    pdeathsig: bool,
) -> None:
    _die_with_parent(parent_pid, pdeathsig)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the learner's to handle; it closes us
    fault_file = open(fault_path, "w")
    faulthandler.enable(fault_file)  # a segfault leaves the env's stack here for the learner
    faulthandler.register(signal.SIGUSR1, fault_file, all_threads=False)  # the learner's "you hung" dump
    shared = Shared(*spec_args, raw=raw)
    go, done = shared.doorbells(index, go_semaphore, done_semaphore)
    commands = 1  # the first "command" is building the envs
    envs: list = []
    try:
        env_fn = cloudpickle.loads(payload)
        envs = [env_fn() for _ in range(lo, hi)]
    except BaseException:
        shared.status[index] = FAILED
        error_conn.send(("building the env", traceback.format_exc()))
    done.ring(commands)
    if shared.status[index] == FAILED:
        return
    stepper = EnvSlice(envs, lo, hi, shared)
    while True:
        commands += 1
        while not go.wait(commands, timeout=1.0):
            pass
        command = int(shared.command[index])
        try:
            if command == STEP:
                stepper.step()
            elif command == RESET:
                stepper.reset()
            elif command == RENDER:
                error_conn.send(("frame", envs[int(shared.arg[index]) - lo].render()))
            elif command == CLOSE:
                stepper.close()
                shared.status[index] = OK
                done.ring(commands)
                return
            shared.status[index] = OK
        except BaseException:
            shared.status[index] = FAILED
            what = {STEP: "step", RESET: "reset", RENDER: "render"}.get(command, "a command")
            error_conn.send((what, traceback.format_exc()))
        done.ring(commands)


class EnvSlice:
    """Envs lo..hi-1 of a batch, stepped one after the other into the batch's arrays (`Shared`):
    the work of one pool worker, or of the whole batch in the trainer's process (`LocalEnvs`).
    A finished env is reset at once, keeping the observation it ended on in `final_obs`."""

    def __init__(self, envs: list, lo: int, hi: int, shared: Shared):
        self.envs, self.lo, self.hi, self.shared = envs, lo, hi, shared
        count = hi - lo
        # This slice's per-step results, filled env by env, then stored in one go.
        self._reward, self._env_score = np.zeros(count), np.zeros(count)
        self._has_score = np.zeros(count, dtype=bool)
        self._running = np.zeros(count)  # the return of each episode in progress (its score without info["score"])
        # Whether these envs report action masks (seen at reset): only then does a step copy them.
        self._masked = False

    def step(self) -> None:
        shared, lo, hi = self.shared, self.lo, self.hi
        obs_out, final_out, actions = shared.obs, shared.final_obs, shared.actions
        term_out, trunc_out = shared.terminated, shared.truncated
        reward, env_score, has_score = self._reward, self._env_score, self._has_score
        discrete = actions.ndim == 1
        masks = shared.action_mask if self._masked else None
        for j, (k, env) in enumerate(zip(range(lo, hi), self.envs)):
            obs, reward[j], terminated, truncated, info = env.step(actions[k] if discrete else actions[k].copy())
            term_out[k] = terminated
            trunc_out[k] = truncated
            score = info.get("score") if info else None
            has_score[j] = score is not None
            if score is not None:
                env_score[j] = score
            if terminated or truncated:
                final_out[k] = obs
                obs, info = env.reset()
                obs_out[k] = obs
            else:
                obs_out[k] = obs
                final_out[k] = obs
            if masks is not None:  # the mask of the observation handed back: after a reset, the reset's
                write_action_mask(masks, info, k)
        ended = term_out[lo:hi] | trunc_out[lo:hi]
        shared.done[lo:hi] = ended
        shared.reward[lo:hi] = reward
        shared.score[lo:hi] = episode_scores(self._running, reward, ended, env_score, has_score)

    def reset(self) -> None:
        """Start every env of the slice, env k seeded with `shared.seeds[k]` (-1: no seed)."""
        shared = self.shared
        for k, env in zip(range(self.lo, self.hi), self.envs):
            seed = int(shared.seeds[k])
            obs, info = env.reset(seed=None if seed < 0 else seed)
            shared.obs[k] = obs
            shared.final_obs[k] = obs
            if shared.action_mask.shape[1]:
                shared.mask_reported[k] = write_action_mask(shared.action_mask, info, k)
        self._masked = bool(shared.mask_reported[self.lo : self.hi].any())
        self._running[:] = 0.0

    def close(self) -> None:
        for env in self.envs:
            env.close()


class LocalEnvs:
    """`WorkerPool`'s interface and arrays with no worker process: every env is stepped in this
    process, in the pool's own loop (`EnvSlice`). Mode `sync`: no wake-ups, no processes, and
    several times less overhead per step than Gymnasium's SyncVectorEnv plus conversions (the
    rollout reads the results as views, as from the pool). An exception in the env's code is
    raised here, as it is, with its own traceback."""

    num_workers = 1
    pids: list[int] = []

    def __init__(
        self,
        env_fn: Callable,
        num_envs: int,
        obs_shape: tuple,
        action_shape: tuple,
        action_dtype: np.dtype,
        mask_size: int = 0,
    ):
        self.num_envs = num_envs
        self.shared = Shared(
            num_envs, tuple(obs_shape), tuple(action_shape), np.dtype(action_dtype), 1, mask_size, raw={}
        )
        self._slice = EnvSlice([env_fn() for _ in range(num_envs)], 0, num_envs, self.shared)

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.shared.seeds[:] = -1 if seed is None else np.arange(seed, seed + self.num_envs)
        self._slice.reset()
        return self.shared.obs

    def step(self, actions: np.ndarray) -> None:
        self.shared.actions[:] = actions
        self._slice.step()

    def render(self, index: int):
        return self._slice.envs[index].render()

    def close(self) -> None:
        self._slice.close()
