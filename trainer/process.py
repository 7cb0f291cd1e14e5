"""The entry point the studio starts in its own process (spawn context):

    ctx = multiprocessing.get_context("spawn")
    queue, stop_event = ctx.Queue(), ctx.Event()
    process = ctx.Process(target=run_training, args=(config_dict, run_dir, queue, stop_event, False))

It imports no UI code. Events go to the queue and to the run directory (metrics.jsonl,
train.log). Any exception becomes an `error` event with its traceback, and the last event is
always `end`. Setting `stop_event` (or Ctrl-C in the terminal that runs the studio) stops the
run cleanly after the current update, with a checkpoint and the final model.
"""
from __future__ import annotations

import signal
import traceback
from pathlib import Path


def run_training(config_dict: dict, run_dir: str, queue, stop_event, resume: bool = False) -> None:
    from trainer.events import EventBus, JsonlSink, LogSink, QueueSink

    queue_sink = QueueSink(queue)
    interrupted = {"flag": False}

    def request_stop(signum, frame) -> None:  # Ctrl-C reaches the whole process group
        interrupted["flag"] = True

    try:
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
    except ValueError:  # not the main thread (tests may call this in a thread)
        pass

    def should_stop() -> bool:
        return interrupted["flag"] or bool(stop_event is not None and stop_event.is_set())

    try:
        from trainer.loop import train

        train(config_dict, run_dir, sinks=[queue_sink], should_stop=should_stop, resume=resume)
    except BaseException as error:  # noqa: BLE001 - the studio must always hear how a run ended
        if not queue_sink.saw_end:
            # train() failed before it had its sinks (e.g. an invalid config): report here.
            sinks = [queue_sink]
            fresh = run_dir is not None and Path(run_dir).is_dir() and not (Path(run_dir) / "metrics.jsonl").exists()
            if fresh:  # never append a failure to the history of an existing run
                sinks += [JsonlSink(Path(run_dir) / "metrics.jsonl"), LogSink(Path(run_dir) / "train.log")]
            bus = EventBus(sinks)
            bus.emit("error", message=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
            bus.emit("end", status="failed", step=0, final_model=None)
            bus.close()
    finally:
        # Let the queue's feeder thread hand over every event before the process exits.
        try:
            queue.close()
            queue.join_thread()
        except (AttributeError, ValueError, OSError):
            pass
