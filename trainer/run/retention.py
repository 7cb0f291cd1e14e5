"""Which checkpoints stay (the newest K and the best), and what a run takes on disk.

One rule, `checkpoints_to_delete`, for the trainer's pruning after every save and the studio's
*Delete old checkpoints* (K = 1) alike; resume always takes the newest checkpoint, never the best.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.run.files import atomic_write, remove_stale_temporaries
from trainer.run.layout import best_path, checkpoint_folder, checkpoint_path, list_checkpoints, read_config
from trainer.run.owner import RunOwnedError, live_owner


@dataclass(frozen=True)
class BestCheckpoint:
    """The checkpoint with the highest `recent_return_mean` so far, as best.json records it."""

    step: int
    recent_return_mean: float


def read_best_checkpoint(folder: str | Path) -> BestCheckpoint | None:
    """best.json of a checkpoint folder, or None (none yet, unreadable, or its file is gone)."""
    try:
        data = json.loads(best_path(folder).read_text(encoding="utf-8"))
        best = BestCheckpoint(step=int(data["step"]), recent_return_mean=float(data["recent_return_mean"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return best if checkpoint_path(folder, best.step).is_file() else None


def record_checkpoint_return(folder: str | Path, step: int, recent_return_mean: float | None) -> bool:
    """Make checkpoint `step` the best if its return is at least the best's (a tie goes to the
    newer one: as good, and trained longer). True when best.json now names it. A checkpoint
    saved before any episode ended (return None or NaN) is never the best."""
    if recent_return_mean is None or not math.isfinite(recent_return_mean):
        return False
    best = read_best_checkpoint(folder)
    if best is not None and best.step != step and recent_return_mean < best.recent_return_mean:
        return False
    atomic_write(best_path(folder), json.dumps({"step": int(step), "recent_return_mean": recent_return_mean}))
    return True


def checkpoints_to_delete(folder: str | Path, keep: int, keep_best: bool = True) -> list[Path]:
    """The retention rule, in one place: every checkpoint but the newest `keep` (keep >= 1) and,
    with keep_best, the one best.json names. The newest is always kept: resume takes it."""
    found = list_checkpoints(folder)
    spared = {step for step, _ in found[-max(1, keep) :]}
    best = read_best_checkpoint(folder) if keep_best else None
    if best is not None:
        spared.add(best.step)
    return [path for step, path in found if step not in spared]


def prune_checkpoints(folder: str | Path, keep: int, keep_best: bool = True) -> list[Path]:
    """Delete what `checkpoints_to_delete` names, and temporary files of dead writers; returns
    the deleted checkpoints."""
    doomed = checkpoints_to_delete(folder, keep, keep_best)
    for path in doomed:
        path.unlink(missing_ok=True)
    remove_stale_temporaries(folder)
    return doomed


def delete_old_checkpoints(run_dir: str | Path) -> list[Path]:
    """Free disk space in a run that is not training: delete every checkpoint but the newest
    (resume continues from it) and the best. RunOwnedError while a live process trains in it
    (that process may be about to read or prune them)."""
    owner = live_owner(run_dir)
    if owner is not None:
        raise RunOwnedError(
            f"{run_dir} is being trained by {owner.describe()}; stop the run before deleting its old checkpoints"
        )
    return prune_checkpoints(checkpoint_folder(run_dir, read_config(run_dir)), keep=1, keep_best=True)


def folder_bytes(folder: str | Path) -> int:
    """Bytes of the files under `folder` (links not followed); 0 when it is missing."""
    total = 0
    stack = [str(folder)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # gone or unreadable: a listing must not fail
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def run_size_bytes(run_dir: str | Path, config: Any = None) -> int:
    """What a run takes on disk: its folder, plus its checkpoint folder when checkpoint.path put
    that outside the run folder. `config` (the run's, if the caller has it) saves reading config.yaml."""
    run_dir = Path(run_dir)
    total = folder_bytes(run_dir)
    checkpoints = checkpoint_folder(run_dir, read_config(run_dir) if config is None else config)
    try:
        checkpoints.resolve().relative_to(run_dir.resolve())
    except (ValueError, OSError):
        total += folder_bytes(checkpoints)
    return total
