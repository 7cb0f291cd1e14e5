"""The trainer processes the studio starts: how (a fork server that imported the trainer once),
with what (`run_training`, or the elastic launcher for several ranks or machines), how a machine
joins a run that accepts workers, and which owner processes the studio may signal.

No gradio, no torch (a run on several ranks imports the launcher when it starts).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from studio.history import RunState
from trainer.run.owner import RunOwner

# (config_dict, run_dir, queue, stop_event, resume); the studio passes queue=None: it reads
# the run's events from metrics.jsonl, as it does for every run.
TrainerTarget = Callable[[dict, str, Any, Any, bool], None]

# How the studio starts a trainer. Not a fork of the studio (its threads, sockets and gradio),
# nor a fresh interpreter per run (spawn: importing torch alone takes about 2 s on a small
# machine, before the first update): a fork server, itself a fresh interpreter that imports
# TRAINER_PRELOAD once, forks each trainer from that clean state. Started with the first
# RunManager, so the imports are done by the time someone presses Start. Spawn where there is
# no fork server (Windows).
TRAINER_START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
TRAINER_PRELOAD = ["trainer.cluster.process", "trainer.run.loop"]


def trainer_context(start_method: str = TRAINER_START_METHOD, start_now: bool = True):
    """The multiprocessing context trainers start from; a fork server is started now (or, with
    start_now=False, by `start_fork_server` or the first run), so that it has imported
    TRAINER_PRELOAD by the time someone presses Start."""
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload(TRAINER_PRELOAD)
        if start_now:
            start_fork_server(start_method)
    return context


def start_fork_server(start_method: str = TRAINER_START_METHOD) -> None:
    """Start the fork server (it imports the trainer, torch included, in its own process); a
    no-op once it runs, and where trainers are spawned."""
    if start_method == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def default_target() -> TrainerTarget:
    """The real trainer (`run_training`), imported only when a run starts."""
    from trainer.cluster.process import run_training  # the trainer lives in its own layer

    return run_training


@dataclass(frozen=True)
class WorkerJoin:
    """How a machine joins a studio run that accepts workers. The token is a secret of the run:
    the studio hands it only to the page that started (or resumed) the run."""

    master: str  # HOST:PORT the run's rendezvous listens on
    token: str

    @property
    def command(self) -> str:
        return f"python -m trainer worker --master {self.master} --token {self.token}"


def launcher_shape(config: dict) -> tuple[int, int]:
    """(processes that train on this machine, most machines) of a run: trainer.cluster.launch.ranks_wanted's
    rule (`nproc_per_node`, else one rank per `gpu_ids` entry), or a learner and its `local_actors`;
    and `max_nodes`. The run queue gives a run that many slots."""
    if config.get("local_actors"):
        return 1 + int(config["local_actors"]), config.get("max_nodes") or 1
    nproc, gpu_ids = config.get("nproc_per_node") or 1, config.get("gpu_ids")
    ranks = 1
    if nproc > 1 or gpu_ids:
        from trainer.cluster.launch import ranks_wanted  # imports torch: only for a run that needs it

        ranks = ranks_wanted(SimpleNamespace(nproc_per_node=nproc, gpu_ids=gpu_ids), None)
    return ranks, config.get("max_nodes") or 1


@dataclass
class ActiveRun:
    """A trainer process this studio started: the run it trains, its stop event, its join (if any)."""

    state: RunState
    process: Any
    stop_event: Any
    join: WorkerJoin | None = None  # a run that accepts workers
    queue_entry: str | None = None  # its entry in the run queue (trainer/run/run_queue.py): released when it ends


@dataclass
class QueuedRun:
    """A run of this studio waiting in the run queue for a slot; it starts by itself when one frees."""

    state: RunState
    queue_entry: str
    resume: bool
    join: WorkerJoin | None = None


def stoppable_trainer(owner: RunOwner) -> bool:
    """Whether the studio may send SIGTERM to `owner`: a live Python process on this host that is
    not the studio itself. owner.json is a file anyone could write, so it must not be able to
    make the studio signal an unrelated process."""
    if owner.host != socket.gethostname() or owner.pid in (os.getpid(), 0, 1):
        return False
    try:
        import psutil

        command = " ".join(psutil.Process(owner.pid).cmdline())
    except Exception:  # noqa: BLE001 - gone, not ours, or no psutil: do not signal it
        return False
    return "python" in command.lower() and ("trainer" in command or "multiprocessing" in command)


def start_trainer(
    context,
    state: RunState,
    resume: bool,
    join: WorkerJoin | None,
    target: TrainerTarget | None,
    cluster_host: str,
    cluster_port: int,
    allow_custom_envs: bool,
) -> ActiveRun:
    """Start the trainer process of `state`'s run from `context` (a multiprocessing context):
    `run_training`, or for several ranks or machines `run_launched` (the elastic launcher, as the
    CLI's --nproc / master). `target`: a test's stand-in trainer, given the plain arguments."""
    chosen, options = target or default_target(), {}
    if join is not None:
        options = dict(host=cluster_host, port=cluster_port, token=join.token, allow_custom_envs=allow_custom_envs)
    elif launcher_shape(state.config)[0] > 1:
        options = dict(
            host="127.0.0.1",
            port=0,
            token=None,  # one machine: loopback, a free port
            allow_custom_envs=allow_custom_envs,
        )
    if target is not None:
        options = {}  # a test's stand-in trainer takes the plain arguments
    elif options:
        from trainer.cluster.process import run_launched

        chosen = run_launched
    stop_event = context.Event()
    process = context.Process(
        target=chosen,
        args=(dict(state.config), str(state.run_dir), None, stop_event, resume),
        kwargs=options,
        name=f"trainer-{state.run_id}",
    )
    state.begin_segment()
    process.start()
    return ActiveRun(state=state, process=process, stop_event=stop_event, join=join)
