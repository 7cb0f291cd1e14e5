"""The entry point the studio starts in its own process (spawn context):

    ctx = multiprocessing.get_context("spawn")
    stop_event = ctx.Event()
    process = ctx.Process(target=run_training, args=(config_dict, run_dir, None, stop_event, False))

It imports no UI code. Events go to the run directory (metrics.jsonl, train.log), where the
studio reads them, and to `queue` if one is given. Any exception becomes an `error` event with
its traceback, and the last event is always `end` (in metrics.jsonl only for a run folder it
started: a failure to resume is never appended to another run's history). Setting `stop_event`,
SIGTERM, Ctrl-C in the terminal that runs the studio, or the death of the studio itself
(trainer/signals.py) stops the run cleanly after the current update, with a checkpoint, the final
model and the `end` event: a trainer is never left running with nobody to stop it.
"""
from __future__ import annotations

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
    from trainer.events import EventBus, JsonlSink, LogSink, QueueSink
    from trainer.run_dir import events_path, log_path
    from trainer.signals import StopRequest

    watcher = _EndWatcher()
    sinks = [watcher] + ([QueueSink(queue)] if queue is not None else [])
    should_stop = StopRequest(stop_event)
    should_stop.install_signals()  # False in a thread (tests): the stop event still works
    should_stop.watch_parent()

    try:
        from trainer.loop import train

        train(config_dict, run_dir, sinks=sinks, should_stop=should_stop, resume=resume)
    except BaseException as error:  # noqa: BLE001 - the studio must always hear how a run ended
        if not watcher.saw_end:
            # train() failed before it had its sinks (e.g. an invalid config): report here.
            fresh = run_dir is not None and Path(run_dir).is_dir() and not events_path(run_dir).exists()
            if fresh:  # never append a failure to the history of an existing run
                sinks += [JsonlSink(events_path(run_dir)), LogSink(log_path(run_dir))]
            else:
                traceback.print_exc()  # the terminal is then the only place that hears of it
            bus = EventBus(sinks)
            bus.emit("error", message=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
            bus.emit("end", status="failed", step=0, final_model=None)
            bus.close()
    finally:
        # Let the queue's feeder thread hand over every event before the process exits.
        if queue is not None:
            try:
                queue.close()
                queue.join_thread()
            except (AttributeError, ValueError, OSError):
                pass
