"""What a run saves and how a resumed run gets it back: the one place that builds checkpoint and
model payloads (the format is described in trainer/run/checkpoint.py) and restores a session from one.
The loop saves the env, counters and random streams; the algorithm (`config.algo`, recorded in
every file) saves its own state (`Algorithm.state_dict`), and resuming builds the same algorithm.

A resumed run on the same layout (native env, same num_envs and world size) continues exactly on
the rank that wrote the checkpoint: env tensors, the sampling generator and the next observations
come back, so stopping and resuming learns bit for bit what an unbroken run learns. That rank is
the writer (`session.is_main`: rank 0 under torchrun, the master's first rank in an elastic
cluster, whatever number the re-formed world gives it). Other ranks, Gymnasium envs and a
changed num_envs start fresh episodes with new random streams (`trainer.run.seeding`, at the
checkpoint's update).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.run.checkpoint import (
    FORMAT,
    FORMAT_VERSION,
    capture_env_state,
    latest_checkpoint,
    library_versions,
    restore_env_state,
    weights_mismatch,
)
from trainer.run.events import trim_events_after
from trainer.run.layout import checkpoint_folder, events_path, list_checkpoints
from trainer.run.seeding import seeds

if TYPE_CHECKING:
    from trainer.run.loop import TrainingSession


class ResumeError(RuntimeError):
    """A run cannot be resumed (no checkpoint, one that does not fit the config, or nothing left to train)."""


END_SEARCH_BYTES = 1 << 20  # a run's `end` is the last line of metrics.jsonl: its tail holds it


def finished_at(run_dir: str | Path) -> int | None:
    """The step at which the run in `run_dir` finished, when its latest segment ended with
    status `finished` (the last start / end event in metrics.jsonl); None otherwise."""
    try:
        with open(events_path(run_dir), "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - END_SEARCH_BYTES))
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:  # a torn line, or the first one of the tail cut in the middle
            continue
        if isinstance(event, dict) and event.get("type") in ("start", "end"):
            step = event.get("step")
            finished = event["type"] == "end" and event.get("status") == "finished"
            return step if finished and isinstance(step, int) and not isinstance(step, bool) else None
    return None


def refuse_finished_run(run_dir: str | Path, total_timesteps: int) -> None:
    """ResumeError when `run_dir` finished at a step that `total_timesteps` does not go beyond:
    resuming it would train nothing and append a second `end` to its history. A larger
    total_timesteps continues it (TrainingSession.recount_updates)."""
    step = finished_at(run_dir)
    if step is not None and total_timesteps <= step:
        raise ResumeError(
            f"run {Path(run_dir).name} finished at step {step} (its end is in {events_path(run_dir)}); "
            f"to train further, continue it with --resume {run_dir} --set total_timesteps=M, M larger "
            f"than {step} (e.g. --set total_timesteps={2 * step})"
        )


def model_payload(session: TrainingSession) -> dict:
    """The final model (`kind: model`): enough for `load_model(path).predict(obs)`."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": "model",
        "policy_spec": session.policy_spec,
        "policy_state": session.policy.state_dict(),  # the algorithm's policy
        "config": session.config.to_dict(),
        "env_name": session.config.env_name,
        "algo": session.config.algo,
        "global_step": session.global_step,
        "update": session.update,
        "elapsed": session.training_seconds(),
        "episodes": session.episodes,
        "versions": library_versions(),
    }


def checkpoint_payload(session: TrainingSession) -> dict:
    """The model plus everything an exact resume needs (`kind: checkpoint`)."""
    payload = model_payload(session)
    payload.update(
        {
            "kind": "checkpoint",
            "algorithm_state": session.algorithm.state_dict(),
            "rng": {"sampling": session.generator.get_state()},
            "env_state": capture_env_state(session.env),
            "next_obs": session.next_obs,
            "num_envs": session.config.num_envs,
            "world_size": session.world_size,
            "gif_seconds": session.gif_schedule.seconds_spent,
        }
    )
    return payload


def resume_session(session: TrainingSession) -> None:
    """Continue `session` from the newest loadable checkpoint of its run; a run that died before
    its first checkpoint starts again from step 0 in its own folder (nothing to lose)."""
    folder = checkpoint_folder(session.run_dir, session.config)
    if session.context is not None:  # the writer reads the disk; ranks on other machines get its checkpoint
        return restore_across_ranks(session.context, session, folder)
    if not list_checkpoints(folder):
        if session.is_main:
            dropped = trim_events_after(events_path(session.run_dir), 0)
            session._pending_logs.append(
                f"no checkpoint to resume from (the run ended before its first one): "
                f"training it again from step 0 in {session.run_dir}"
                + (f" ({dropped} events of the earlier attempt dropped)" if dropped else "")
            )
        return
    path = restore_latest(session, folder)
    session.recount_updates()
    if session.is_main:
        dropped = trim_events_after(events_path(session.run_dir), session.global_step)
        session._pending_logs.append(
            f"resumed from {path} at step {session.global_step}"
            + (f" ({dropped} events after it dropped from metrics.jsonl)" if dropped else "")
        )


def restore_latest(session: TrainingSession, folder: Path) -> Path:
    """Load the newest loadable checkpoint in `folder` into `session`; returns its path."""
    found = latest_checkpoint(folder, map_location=session.device)
    if found is None:
        raise ResumeError(
            f"nothing to resume: no loadable checkpoint in {folder}. Start a new run instead, "
            f"or point --resume at a run directory that has checkpoints/ckpt_<step>.pth"
        )
    path, payload = found
    restore(session, payload, path)
    return path


def restore(session: TrainingSession, payload: dict, path: Path | str = "the checkpoint") -> None:
    """Put a checkpoint (or a final model: its weights and counters) into `session`."""
    saved_algo = payload.get("algo") or "ppo"  # format 1 files of `algo: ppo` / `a2c` carry it too
    if saved_algo != session.config.algo:
        raise ResumeError(
            f"{path} was trained with algo {saved_algo!r}, but this config trains "
            f"{session.config.algo!r}; resume with the run's own config.yaml "
            f"(or --set algo={saved_algo})"
        )
    saved_spec, spec = payload["policy_spec"], session.policy_spec
    if saved_spec != spec:
        raise ResumeError(
            f"{path} holds a {saved_spec['model_type']} network for observations "
            f"{saved_spec['obs_shape']} / actions {saved_spec['action']}, but this config builds "
            f"{spec['model_type']} for {spec['obs_shape']} / {spec['action']}; resume with the "
            f"run's own config.yaml"
        )
    problem = weights_mismatch(session.policy.state_dict(), payload.get("policy_state"))
    if problem:  # the spec matches, the weights do not: a damaged or crafted file
        raise ResumeError(f"{path}: the saved weights do not fit this run's network: {problem}")
    session.policy.load_state_dict(payload["policy_state"])
    session.global_step = int(payload["global_step"])
    session.update = int(payload["update"])
    session.episodes = int(payload.get("episodes", 0))
    session.elapsed_before = float(payload.get("elapsed", 0.0))
    session.resumed_from_step = session.global_step
    if payload.get("kind") == "checkpoint":
        session.algorithm.load_state_dict(algorithm_state(payload))
        session.gif_schedule.seconds_spent = float(payload.get("gif_seconds", 0.0))
        same_layout = (
            payload.get("num_envs") == session.config.num_envs and payload.get("world_size") == session.world_size
        )
        # The env state saved is the writer's own: only the writer continues it exactly.
        if payload.get("env_state") is not None and same_layout and session.is_main:
            session.generator.set_state(payload["rng"]["sampling"])
            restore_env_state(session.env, payload["env_state"])
            session.next_obs = payload["next_obs"].to(session.device)
            return
    # Gymnasium envs, ranks other than the writer, a changed num_envs or a final model: fresh episodes, new streams.
    fresh = seeds(session.config.seed, session.rank, session.update)
    session.generator.manual_seed(fresh.sampling)
    session.next_obs = session.env.reset(seed=fresh.env)


def algorithm_state(payload: dict) -> dict:
    """The algorithm's own state in a checkpoint. Format 1 (before algorithms had their own
    state) kept PPO's optimiser and reward scaler at the top level: read as PPO's state now."""
    if "algorithm_state" in payload:
        return payload["algorithm_state"]
    return {"optimizer": payload["optimizer_state"], "reward_scaler": payload.get("reward_scaler")}


def restore_across_ranks(context, session, folder) -> None:
    """Resume every rank from the writer's newest checkpoint (read from its disk, broadcast),
    so ranks on machines without the run folder continue too; no checkpoint: step 0."""
    found = latest_checkpoint(folder, map_location="cpu") if context.is_main else None
    found = context.broadcast_value((str(found[0]), found[1]) if found else None)
    step = 0
    if found is not None:
        payload = found[1]
        payload["env_state"] = _to_device(payload.get("env_state"), session.device)
        restore(session, payload, found[0])
        step = session.global_step
        session.recount_updates()
    if context.is_main:
        dropped = trim_events_after(events_path(session.run_dir), step)
        session._pending_logs.append(
            (
                f"resumed from {found[0]} at step {step} on {context.world_size} ranks"
                if found
                else "no checkpoint yet: training from step 0"
            )
            + (f" ({dropped} events after it dropped)" if dropped else "")
        )


def _to_device(value, device):
    """A broadcast checkpoint's tensors onto this rank's device (next_obs, env state)."""
    from torch import Tensor

    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {name: _to_device(item, device) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(item, device) for item in value)
    return value
