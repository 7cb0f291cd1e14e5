"""Event sinks: the listeners an `EventBus` (trainer/run/events.py) sends every event to.

`JsonlSink` (metrics.jsonl, the durable history), `LogSink` (train.log, the console), `QueueSink`
(a live channel for a caller's own process), `TensorBoardSink` (optional), `ProgressBarSink` (the
CLI on a terminal). A sink is a callable taking an event dict, with `close()`.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from trainer.config.metrics import tensorboard_tags
from trainer.run.events import format_event
from trainer.run.storage import storage_error


class JsonlSink:
    """Appends every event as one JSON line to `metrics.jsonl`, the durable history.

    The file is opened per event (a few microseconds, at most a few times a second): every line
    is on disk when the call returns, and a rewrite of the file by `trim_events_after` (resume)
    is never undone by a stale handle. A write that fails (full disk) is cut back to the last
    whole line and raised as StorageError: the file never ends in half a line, and the run stops."""

    essential = True

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, event: dict) -> None:
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise storage_error(self.path, error) from None
        try:
            end = os.lseek(descriptor, 0, os.SEEK_END)
            try:
                written = os.write(descriptor, data)
                if written != len(data):  # a short write is how a full disk shows itself to os.write
                    raise OSError(errno.ENOSPC, "short write")
            except OSError as error:
                try:
                    os.ftruncate(descriptor, end)
                except OSError:
                    pass
                raise storage_error(self.path, error, needed=len(data)) from None
        finally:
            os.close(descriptor)

    def close(self) -> None:
        pass


class LogSink:
    """Writes log lines: to `train.log` (with a timestamp) or to a stream such as stdout."""

    def __init__(
        self,
        path: str | Path | None = None,
        stream=None,
        log_interval: int = 1,
        timestamps: bool | None = None,
        write: Callable[[str], None] | None = None,
    ):
        self.log_interval = log_interval
        self._file = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")
        self._stream = stream
        self._write = write
        self.timestamps = (path is not None) if timestamps is None else timestamps

    def __call__(self, event: dict) -> None:
        line = format_event(event, self.log_interval)
        if line is None:
            return
        if self.timestamps:
            line = time.strftime("%Y-%m-%d %H:%M:%S ", time.localtime(event["time"])) + line
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        if self._write is not None:
            self._write(line)
        elif self._stream is not None:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class QueueSink:
    """Puts every event on a (multiprocessing) queue: the studio's live channel."""

    def __init__(self, queue):
        self.queue = queue
        self.saw_end = False

    def __call__(self, event: dict) -> None:
        self.queue.put(event)
        if event["type"] == "end":
            self.saw_end = True

    def close(self) -> None:
        pass


class TensorBoardSink:
    """Scalars under `<run_dir>/tensorboard` so that `tensorboard --logdir runs` works."""

    TAGS: dict[str, str] = tensorboard_tags()  # metrics field -> tag, from trainer/config/metrics.py
    SCALARS = tuple(TAGS)

    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        self.writer = SummaryWriter(str(log_dir))

    def __call__(self, event: dict) -> None:
        if event["type"] != "metrics":
            return
        for name, tag in self.TAGS.items():
            value = event.get(name)
            if value is not None:
                self.writer.add_scalar(tag, value, event["step"])

    def close(self) -> None:
        self.writer.close()


class ProgressBarSink:
    """A tqdm bar (steps, FPS, mean return, ETA) for a terminal; log lines print above it."""

    def __init__(self, total: int, log_interval: int = 1, stream=None):
        from tqdm import tqdm

        self._tqdm = tqdm
        self.bar = tqdm(total=total, unit="step", unit_scale=True, dynamic_ncols=True, file=stream or sys.stdout)
        self.lines = LogSink(log_interval=log_interval, write=lambda line: tqdm.write(line, file=stream or sys.stdout))

    def __call__(self, event: dict) -> None:
        if event["type"] == "start":
            self.bar.total = event["total_timesteps"]  # rounded up to whole updates
            if event["resumed_from_step"]:
                self.bar.update(event["resumed_from_step"] - self.bar.n)
            self.bar.refresh()
        if event["type"] == "metrics":
            self.bar.update(max(0, event["step"] - self.bar.n))
            postfix = {}
            if event["recent_return_mean"] is not None:
                postfix["return"] = f"{event['recent_return_mean']:.1f}"
            if event.get("recent_score_mean") is not None and event["recent_score_mean"] != event["recent_return_mean"]:
                postfix["score"] = f"{event['recent_score_mean']:.1f}"
            self.bar.set_postfix(postfix, refresh=False)
        self.lines(event)

    def close(self) -> None:
        self.bar.close()
