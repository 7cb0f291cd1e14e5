"""The entry point the studio starts in its own process (studio/runs.py: forked from a fork
server that imported this module and trainer.run.loop once; spawn where there is none):

    ctx = multiprocessing.get_context("forkserver")
    stop_event = ctx.Event()
    process = ctx.Process(target=run_training, args=(config_dict, run_dir, None, stop_event, False))

It imports no UI code. Events go to the run directory (metrics.jsonl, train.log), where the
studio reads them, and to `queue` if one is given. Any exception becomes an `error` event with
its traceback, and the last event is always `end` (in metrics.jsonl only for a run folder it
started: a failure to resume is never appended to another run's history). Setting `stop_event`,
SIGTERM, Ctrl-C in the terminal that runs the studio, or the death of the process that started
it (trainer/cluster/signals.py; the fork server, which exits with the studio) stops the run cleanly after the current update, with a checkpoint, the final
model and the `end` event: a trainer is never left running with nobody to stop it.

A run on several processes (`nproc_per_node` > 1) or one that accepts workers (`max_nodes` > 1)
gets `run_launched` instead: that process becomes the run's master through the CLI's own elastic
launcher (trainer.cluster.launch.host_run), so the studio has no launcher of its own. So does a
run with `local_actors`: that process hosts the learner and its actors as `--actors N` does
(trainer/cluster/learner.py host_actor_learner).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path


class _EndWatcher:
    """A sink that only notes whether train() reported the end of the run itself."""

    def __init__(self):
        self.saw_end = False

    def __call__(self, event: dict) -> None:
        self.saw_end = self.saw_end or event["type"] == "end"

    def close(self) -> None:
        pass


def run_training(config_dict: dict, run_dir: str, queue=None, stop_event=None, resume: bool = False) -> None:
    from trainer.cluster.signals import StopRequest
    from trainer.run.sinks import QueueSink

    watcher = _EndWatcher()
    sinks = [watcher] + ([QueueSink(queue)] if queue is not None else [])
    should_stop = StopRequest(stop_event)
    should_stop.install_signals()  # False in a thread (tests): the stop event still works
    should_stop.watch_parent()

    try:
        from trainer.run.loop import train

        train(config_dict, run_dir, sinks=sinks, should_stop=should_stop, resume=resume)
    except BaseException as error:  # noqa: BLE001 - the studio must always hear how a run ended
        if not watcher.saw_end:
            # train() failed before it had its sinks (e.g. an invalid config): report here.
            _report_unstarted(run_dir, sinks, "failed", error)
    finally:
        # Let the queue's feeder thread hand over every event before the process exits.
        if queue is not None:
            try:
                queue.close()
                queue.join_thread()
            except (AttributeError, ValueError, OSError):
                pass


def _report_unstarted(run_dir: str | None, sinks: list, status: str, error: BaseException | None) -> None:
    """The `end` (and `error`) of a run whose trainer never wrote its own; into the run folder
    only while it has no history (never appended to the history of an existing run)."""
    from trainer.run.events import EventBus
    from trainer.run.layout import events_path, log_path
    from trainer.run.sinks import JsonlSink, LogSink
    from trainer.run.storage import failure_message

    sinks = list(sinks)
    fresh = run_dir is not None and Path(run_dir).is_dir() and not events_path(run_dir).exists()
    if fresh:
        sinks += [JsonlSink(events_path(run_dir)), LogSink(log_path(run_dir))]
    details = "".join(traceback.format_exception(error)) if error is not None else ""
    if error is not None and not fresh:
        print(details, end="", file=sys.stderr)  # the terminal is then the only place that hears of it
    bus = EventBus(sinks)
    if error is not None:
        bus.emit("error", message=failure_message(error, run_dir), traceback=details)
    bus.emit("end", status=status, step=0, final_model=None)
    bus.close()


def run_launched(
    config_dict: dict,
    run_dir: str,
    queue=None,
    stop_event=None,
    resume: bool = False,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    allow_custom_envs: bool = False,
) -> None:
    """A studio run on several processes or machines. This process hosts the rendezvous on
    host:port and runs the elastic agent of this machine's ranks, exactly as
    `python -m trainer --nproc N` / `python -m trainer master` do (port 0: a free one). The ranks
    decide from the run folder whether to resume, so `resume` needs no handling here.

    A stop (the studio's event, SIGTERM, the studio's death) is the agent's own: SIGTERM to this
    process makes the agent pass SIGTERM to its ranks (a clean stop where the rank honours it),
    and also ends a rendezvous still waiting for workers. The master's lines (Worker connected /
    lost, errors) go to train.log, which the studio shows; the token never does (only the page
    that started the run is told it)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from trainer.cluster.launch import free_port, host_run, ranks_wanted
    from trainer.cluster.signals import StopRequest
    from trainer.config.validation import config_from_dict
    from trainer.run.events import EventBus
    from trainer.run.layout import log_path
    from trainer.run.sinks import LogSink

    if token is None and config_dict.get("local_actors"):
        from trainer.cluster.admission import new_token

        token = new_token()  # the local actors' (the learner's gate wants one); kept out of train.log below

    def hidden(line: str) -> str:
        return line.replace(token, "<token: shown on the page that started the run>") if token else line

    log = EventBus([LogSink(log_path(run_dir))])

    def say(line: str) -> None:
        print(hidden(line), flush=True)
        log.log(hidden(line))

    stop, done = StopRequest(stop_event), threading.Event()
    stop.watch_parent()

    def signal_agent() -> None:
        while not done.wait(0.5):
            if stop():
                say(f"Stopping ({stop.reason}): SIGTERM to the elastic agent, which passes it to the ranks")
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def raise_signal(signum, frame):  # the agent installs the same once its ranks start
        raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))

    signal.signal(signal.SIGTERM, raise_signal)
    threading.Thread(target=signal_agent, name="stop-watch", daemon=True).start()
    status, failure = None, None
    try:
        config = config_from_dict(config_dict)
        if config.local_actors:  # a learner and its actors, as `python -m trainer --actors N`
            from trainer.cluster.learner import host_actor_learner

            code = host_actor_learner(
                config,
                Path(run_dir),
                host,
                port,
                token,
                config.local_actors,
                say=say,
                allow_custom_envs=allow_custom_envs,
            )
        else:
            code = host_run(
                config,
                Path(run_dir),
                host,
                port or free_port(host),
                token,
                ranks_wanted(config, None),
                say=say,
                allow_custom_envs=allow_custom_envs,
                flag="`python app.py --allow-custom-envs`",
            )
        status = None if code == 0 else "stopped" if stop.reason else "failed"  # host_run says why
    except SignalException:
        status = "stopped"
    except BaseException as error:  # noqa: BLE001 - e.g. the port is taken: the studio must hear it
        say(f"error: {type(error).__name__}: {error}")
        status, failure = "failed", error
    finally:
        done.set()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.close()
    if status is not None:  # no rank got to write the run's history: say how it ended
        _report_unstarted(run_dir, [], status, failure)
