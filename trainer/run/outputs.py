"""What a training session puts out after each update: the metrics event, checkpoints (kept and
pruned as `checkpoint` says), the final model and rollout GIFs.

Functions of a `TrainingSession` (trainer/run/loop.py), which calls them from its one loop; the
payloads they save are trainer/run/resume.py's, the GIF schedule and recorder trainer/run/gif.py's.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.algos.base import Algorithm
from trainer.run.checkpoint import atomic_save
from trainer.run.events import EVENT_SCHEMA
from trainer.run.layout import checkpoint_folder, checkpoint_path, final_model_path, rollout_gif_path
from trainer.run.resume import checkpoint_payload, model_payload
from trainer.run.retention import prune_checkpoints, record_checkpoint_return
from trainer.run.seeding import seeds
from trainer.run.storage import storage_error

if TYPE_CHECKING:
    from trainer.run.loop import TrainingSession

# errno values of a failed write (a GIF that hits these stops the run; other GIF failures only turn GIFs off)
WRITE_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}


def emit_metrics(session: TrainingSession, statistics: dict) -> dict:
    """The metrics event of the update just done (episode numbers merged over all ranks)."""
    summary = session.env.stats.drain()
    totals = [
        summary.count,
        (summary.return_mean or 0.0) * summary.count,
        (summary.length_mean or 0.0) * summary.count,
        (summary.score_mean or 0.0) * summary.count,
    ]
    recent = [summary.recent_return_mean, summary.recent_length_mean, summary.recent_score_mean]
    if session.context is not None:
        totals, recent = session.context.merge_episode_numbers(totals, recent, session.device)
    count = int(round(totals[0]))
    session.episodes += count
    session_seconds = time.perf_counter() - session.session_started
    steps_this_session = session.global_step - session.session_start_step

    def mean(total: float) -> float | None:
        return total / count if count else None

    fields = dict(
        step=session.global_step,
        update=session.update,
        fps=steps_this_session / max(session_seconds, 1e-9),
        elapsed=session.elapsed_before + session_seconds,
        episodes=session.episodes,
        episode_return_mean=mean(totals[1]),
        episode_length_mean=mean(totals[2]),
        episode_score_mean=mean(totals[3]),
        recent_return_mean=recent[0],
        recent_length_mean=recent[1],
        recent_score_mean=recent[2],
        episode_return_max=summary.return_max,
        episode_score_max=summary.score_max,
        episodes_this_update=count,
        total_timesteps=session.num_updates * session.steps_per_update,
        final_update=session.update == session.num_updates,
        **statistics,
    )
    # Null: what this algorithm never computes, and what an update without a gradient step (DQN
    # and SAC before learning_starts) did not.
    for name in (*session.blank_metrics, *session.algorithm.metric_names):
        fields.setdefault(name, None)
    if session.is_main:
        session.last_metrics = session.bus.emit("metrics", **fields)
    return fields


def recent_episode_length(session: TrainingSession) -> float | None:
    return (session.last_metrics or {}).get("recent_length_mean")


def record_gif(session: TrainingSession, training_seconds: float | None) -> None:
    """One rollout GIF now (GifSchedule says when); training_seconds None: after training."""
    path = rollout_gif_path(session.run_dir, session.global_step)
    schedule = session.gif_schedule
    frames = schedule.frames(training_seconds)  # before started(): the session's first is whole
    schedule.started(time.perf_counter())
    try:
        result = session.gif_recorder.record(
            session.policy.state_dict(),
            path,
            seed=seeds(session.config.seed, update=session.update).gif,
            play_on_seconds=schedule.play_on_seconds(training_seconds, recent_episode_length(session), frames),
            max_frames=frames,
        )
    except Exception as error:  # noqa: BLE001 - a GIF must never end a training run, except a full disk
        if isinstance(error, OSError) and error.errno in WRITE_FAILURES:
            raise storage_error(path, error) from None  # the disk, not the GIF: checkpoints fail next
        session.bus.log(
            f"rollout GIFs turned off: recording one failed with {type(error).__name__}: {error}", level="warning"
        )
        session.gif_recorder.close()
        session.gif_recorder = None
        return
    schedule.spent(result)
    session.bus.emit("gif", step=session.global_step, **result.event_fields())


def checkpoint_due(session: TrainingSession) -> bool:
    """Every `checkpoint.interval` updates, or `checkpoint.interval_seconds` after the last one."""
    every, seconds = session.config.checkpoint.interval, session.config.checkpoint.interval_seconds
    last = session.session_started if session.last_checkpoint_at is None else session.last_checkpoint_at
    return bool(every and session.update % every == 0) or bool(seconds and time.perf_counter() - last >= seconds)


def save_checkpoint(session: TrainingSession) -> Path:
    session.last_checkpoint_at = time.perf_counter()
    folder = checkpoint_folder(session.run_dir, session.config)
    path = atomic_save(checkpoint_payload(session), checkpoint_path(folder, session.global_step))
    if session.config.checkpoint.keep_best:  # best.json: which checkpoint pruning spares however old
        record_checkpoint_return(folder, session.global_step, (session.last_metrics or {}).get("recent_return_mean"))
    prune_checkpoints(folder, session.config.checkpoint.keep, session.config.checkpoint.keep_best)
    session.bus.emit("checkpoint", step=session.global_step, path=str(path))
    return path


def save_final_model(session: TrainingSession, path: str | Path | None = None) -> Path:
    path = atomic_save(model_payload(session), path or final_model_path(session.run_dir, session.config))
    session.bus.emit("model", step=session.global_step, path=str(path))
    return path


def metric_blanks(algorithm: Algorithm) -> tuple[str, ...]:
    """The required fields of a metrics event that the algorithm does not compute (an algorithm
    without a critic has no value_loss): null when the loop has none either. Refuses a metric name
    that no metrics event carries."""
    schema = EVENT_SCHEMA["metrics"]
    unknown = [name for name in algorithm.metric_names if name not in schema.fields]
    if unknown:
        raise ValueError(
            f"{type(algorithm).__name__}.metric_names has {unknown}, which no metrics event carries: "
            f"declare them in trainer/config/metrics.py"
        )
    return tuple(name for name in schema.required if name not in algorithm.metric_names)
