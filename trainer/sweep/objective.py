"""One trial: its runs (one normal run folder per seed, each trained by `train()` in a process of
its own) and its objective, the metric they report.

    process = context.Process(target=run_trial_seed, args=(config, run_dir, tag, metric, events, stop, acked))
    curve = TrialCurve(seeds=1, total_timesteps=200_000, reports=20)
    curve.add(seed_index, step, value)  -> [(report, mean over seeds, step)]   new points for trial.report

A run sends `(tag, seq, event)` on `events` for its start, each update's metric, and its end; the
sweep answers each update by setting `acked` to its `seq`, after asking the pruner. A run never
runs more than one update ahead of that answer (`PacedStop`), so a pruned trial stops within an
update of the decision: cleanly, like any stop, with a checkpoint, its final model and an `end`
event of status `stopped`. The sweep's death (even SIGKILL) stops its runs the same way
(trainer.cluster.signals.StopRequest watches the process that started them), and a retried trial
resumes the same run folders from their checkpoints, its earlier reports read back from
metrics.jsonl.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.cluster.signals import StopRequest
from trainer.run.events import read_events
from trainer.run.layout import events_path, holds_a_run
from trainer.run.owner import live_owner

AHEAD = 1  # updates a run may train past the sweep's last answer
OWNER_WAIT_SECONDS = 120.0  # a retried trial waits this long for the stopped sweep's runs to let go


class PacedStop:
    """`should_stop` of a trial's run: the sweep pruned it or is stopping (the stop event), a signal,
    or the sweep is gone; and it waits while the sweep has not answered its update before last."""

    def __init__(self, stop_event: Any, acked: Any):
        self.stop = StopRequest(stop_event)
        self.acked = acked
        self.sent = 0  # live metrics events sent (seq of the last one)

    def __call__(self) -> bool:
        while self.sent - self.acked.value > AHEAD and not self.stop():
            time.sleep(0.002)
        return self.stop()


class SweepSink:
    """An event sink that sends the sweep what it needs: start, each update's metric, the end.
    On a resumed run it first sends the updates already in metrics.jsonl (seq 0: not answered)."""

    def __init__(self, events: Any, tag: Any, metric: str, paced: PacedStop, run_dir: Path):
        self.events, self.tag, self.metric, self.paced, self.run_dir = events, tag, metric, paced, run_dir
        self.saw_end = False

    def __call__(self, event: dict) -> None:
        kind = event["type"]
        if kind == "start" and event.get("resumed_from_step") is not None:
            done = event["resumed_from_step"]
            for old in read_events(events_path(self.run_dir)):
                if old.get("type") == "metrics" and (old.get("step") or 0) <= done:
                    self.events.put(
                        (self.tag, 0, {"type": "metrics", "step": old["step"], "value": old.get(self.metric)})
                    )
        elif kind == "metrics":
            self.paced.sent += 1
            self.events.put(
                (self.tag, self.paced.sent, {"type": "metrics", "step": event["step"], "value": event.get(self.metric)})
            )
        elif kind == "error":
            self.events.put((self.tag, 0, {"type": "error", "message": event["message"]}))
        elif kind == "end":
            self.saw_end = True
            self.events.put((self.tag, 0, {"type": "end", "status": event["status"], "step": event["step"]}))

    def close(self) -> None:
        pass


def run_trial_seed(config: dict, run_dir: str, tag: Any, metric: str, events: Any, stop_event: Any, acked: Any) -> None:
    """The process of one run of a trial: `train()` into `run_dir` (resumed when it holds a run:
    a requeued trial), reporting to the sweep."""
    from trainer.run.loop import train
    from trainer.run.owner import RunOwnedError
    from trainer.run.storage import failure_message

    paced = PacedStop(stop_event, acked)
    paced.stop.install_signals()  # Ctrl-C reaches the whole process group: stop cleanly, like the CLI
    paced.stop.watch_parent()
    sink = SweepSink(events, tag, metric, paced, Path(run_dir))
    deadline = time.monotonic() + OWNER_WAIT_SECONDS
    try:
        while True:
            # The run of a killed sweep may still be saving (or just starting) in this folder:
            # the owner file lets one trainer in at a time; wait for it, then resume what it left.
            while live_owner(run_dir) is not None and time.monotonic() < deadline and not paced.stop():
                time.sleep(0.2)
            try:
                train(config, run_dir, sinks=[sink], should_stop=paced, resume=holds_a_run(run_dir, config))
                return
            except RunOwnedError:
                if time.monotonic() > deadline or paced.stop():
                    raise
    except BaseException as error:  # noqa: BLE001 - the sweep must always hear how a run ended
        if not sink.saw_end:
            events.put((tag, 0, {"type": "error", "message": failure_message(error, Path(run_dir))}))
    finally:
        events.close()
        sweep = multiprocessing.parent_process()
        if sweep is not None and not sweep.is_alive():
            events.cancel_join_thread()  # nobody reads any more: do not wait on a full pipe
        events.join_thread()  # every event handed over before the process exits


@dataclass
class TrialCurve:
    """A trial's metric as its runs report it. Report point k (1..reports) is k/reports of the
    budget; a run's value there is the metric of its first update at or past it (an update that
    passes several points counts for the last). A point is reported, as the mean over seeds, once
    every seed has a value there, so trials with the same steps per update report the same points."""

    seeds: int
    total_timesteps: int
    reports: int
    points: list[dict[int, float]] = field(default_factory=list)  # per seed: report point -> value
    last_values: list[float | None] = field(default_factory=list)  # per seed: the latest value
    reported: dict[int, float] = field(default_factory=dict)  # point -> mean over seeds, in order
    last_step: int = 0

    def __post_init__(self):
        self.points = [{} for _ in range(self.seeds)]
        self.last_values = [None] * self.seeds

    def add(self, seed_index: int, step: int, value: Any) -> list[tuple[int, float, int]]:
        """One update of one seed; returns the report points this completes: (point, mean, step)."""
        self.last_step = max(self.last_step, int(step))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return []  # no episode finished yet (null): the point waits for a later update
        self.last_values[seed_index] = float(value)
        point = min(self.reports, int(step) * self.reports // max(1, self.total_timesteps))
        mine = self.points[seed_index]
        if point < 1 or (mine and point <= max(mine)):
            return []
        mine[point] = float(value)
        if point in self.reported or not all(point in other for other in self.points):
            return []
        mean = sum(other[point] for other in self.points) / self.seeds
        self.reported[point] = mean
        return [(point, mean, int(step))]

    def value(self, mode: str, direction: str) -> float | None:
        """The objective: the mean over seeds of the metric when training ended (`final`), the
        best reported point (`best`), or the mean over every report point 1..reports (`mean`: the
        area under the learning curve, a point an update skipped taking the value reported before
        it, points before the first report the first value); None when a seed never had a value."""
        if mode == "best" and self.reported:
            pick = max if direction == "maximize" else min
            return pick(self.reported.values())
        if mode == "mean" and self.reported:
            held = self.reported[min(self.reported)]
            total = 0.0
            for point in range(1, self.reports + 1):
                held = self.reported.get(point, held)
                total += held
            return total / self.reports
        if any(value is None for value in self.last_values):
            return None
        return sum(self.last_values) / self.seeds
