"""The run directory, in one place: names, paths, checkpoint listing, atomic writes, the owner
file and the status rule. The trainer writes a run folder through it and the studio reads one
through it, so the two never disagree about where a file is or what state a run is in.

Imports neither torch nor the studio: the studio's process uses it to list and follow runs.
`LAYOUT` below is the layout; docs/architecture.md ("Run directory") shows the same table and
tests/test_run_dir.py keeps the two equal.
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

CONFIG_FILE = "config.yaml"
EVENTS_FILE = "metrics.jsonl"
LOG_FILE = "train.log"
OWNER_FILE = "owner.json"
METRICS_CSV_FILE = "metrics.csv"
CHECKPOINTS_DIR = "checkpoints"
ROLLOUTS_DIR = "rollouts"
TENSORBOARD_DIR = "tensorboard"
FINAL_MODEL_SUFFIX = "_final.pth"
BEST_FILE = "best.json"
NOTES_FILE = "notes.json"

LAYOUT: dict[str, str] = {
    CONFIG_FILE: "the validated config, every key",
    EVENTS_FILE: "every event, one JSON object per line (durable history)",
    LOG_FILE: "the log lines",
    OWNER_FILE: "pid, host and start time of the process training in the folder (while it trains)",
    f"{CHECKPOINTS_DIR}/ckpt_<step>.pth": "last K kept, plus the best (checkpoint.path moves the folder)",
    f"{CHECKPOINTS_DIR}/{BEST_FILE}": "step and recent_return_mean of the best checkpoint (checkpoint.keep_best)",
    f"{ROLLOUTS_DIR}/step_<step>.gif": "rollout GIFs",
    f"<env>_<algo>{FINAL_MODEL_SUFFIX}": "the final model, e.g. flappy_bird_ppo_final.pth",
    METRICS_CSV_FILE: "the metrics as CSV (written by the studio's download)",
    f"{TENSORBOARD_DIR}/": "TensorBoard scalars (tensorboard: true)",
    NOTES_FILE: "the name and notes a person gave the run (the studio's Runs tab)",
}

END_STATUSES = ("finished", "stopped", "failed")   # what an `end` event may say
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_CHECKPOINT_NAME = re.compile(r"^ckpt_(\d+)\.pth$")
_TEMPORARY_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


# ---------------------------------------------------------------------------------------------
# Names


def safe_name(text: str) -> str:
    """Only [A-Za-z0-9._-]; anything else becomes '_'."""
    return _UNSAFE.sub("_", text).strip("._") or "run"


def env_label(env_name: str) -> str:
    """`cartpole` for CartPole-v1, `Acrobot-v1` for a Gymnasium id: the name used in file names."""
    try:
        from envs import resolve_env_name  # imports torch: only when a name is made, never to read

        env_name = resolve_env_name(env_name)
    except Exception:  # noqa: BLE001 - a label must never fail
        pass
    return safe_name(env_name.replace("gym:", "").split(":")[-1])


def _setting(config: Any, name: str, default: Any = None) -> Any:
    """`config.name` of a TrainConfig or `config[name]` of a plain dict (config.yaml, the studio)."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def new_run_id(config: Any, runs_dir: str | Path) -> str:
    """`<env>-<model>-<YYYYmmdd-HHMMSS>[-n]`, not yet taken in `runs_dir`."""
    env = env_label(str(_setting(config, "env_name") or "env"))
    base = f"{env}-{safe_name(str(_setting(config, 'model_type') or 'model'))}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, number = base, 1
    while (Path(runs_dir) / candidate).exists():
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def create_run_dir(config: Any, runs_dir: str | Path = "runs") -> Path:
    """Make a fresh, uniquely named run directory under `runs_dir` and return its path."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    while True:
        run_dir = runs_dir / new_run_id(config, runs_dir)
        try:
            run_dir.mkdir()
            return run_dir.resolve()
        except FileExistsError:  # another process took the name in the meantime
            continue


# ---------------------------------------------------------------------------------------------
# Paths


def config_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CONFIG_FILE


def events_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / EVENTS_FILE


def log_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOG_FILE


def metrics_csv_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / METRICS_CSV_FILE


def rollout_gif_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / ROLLOUTS_DIR / f"step_{step}.gif"


def final_model_path(run_dir: str | Path, config: Any) -> Path:
    """Where the trainer writes the final model: `<env>_<algo>_final.pth`."""
    name = f"{env_label(str(_setting(config, 'env_name') or 'env'))}_{_setting(config, 'algo') or 'ppo'}"
    return Path(run_dir) / (name + FINAL_MODEL_SUFFIX)


def find_final_model(run_dir: str | Path) -> Path | None:
    """The final model of a run folder, if it has one (the newest, should there be several)."""
    finals = [path for path in Path(run_dir).glob("*" + FINAL_MODEL_SUFFIX) if path.is_file()]
    return max(finals, key=lambda path: (path.stat().st_mtime, path.name)) if finals else None


def checkpoint_folder(run_dir: str | Path, config: Any = None) -> Path:
    """`<run_dir>/checkpoints`, or `checkpoint.path` (relative paths are inside the run folder)."""
    section = _setting(config, "checkpoint") if config is not None else None
    custom = _setting(section, "path") if isinstance(section, Mapping) or hasattr(section, "path") else None
    if not custom:
        return Path(run_dir) / CHECKPOINTS_DIR
    path = Path(os.path.expanduser(str(custom)))
    return path if path.is_absolute() else Path(run_dir) / path


def checkpoint_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"ckpt_{step}.pth"


def list_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint in `folder`, oldest first (temporary files ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _CHECKPOINT_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


def latest_checkpoint_path(run_dir: str | Path, config: Any = None) -> Path | None:
    """The newest checkpoint file of a run (not opened: `trainer.run.checkpoint` loads it)."""
    if config is None:
        config = read_config(run_dir)
    found = list_checkpoints(checkpoint_folder(run_dir, config))
    return found[-1][1] if found else None


# ---------------------------------------------------------------------------------------------
# Retention: which checkpoints stay (the newest K and the best) and what a run takes on disk


@dataclass(frozen=True)
class BestCheckpoint:
    """The checkpoint with the highest `recent_return_mean` so far, as best.json records it."""

    step: int
    recent_return_mean: float


def read_best_checkpoint(folder: str | Path) -> BestCheckpoint | None:
    """best.json of a checkpoint folder, or None (none yet, unreadable, or its file is gone)."""
    try:
        data = json.loads((Path(folder) / BEST_FILE).read_text(encoding="utf-8"))
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
    atomic_write(Path(folder) / BEST_FILE, json.dumps({"step": int(step), "recent_return_mean": recent_return_mean}))
    return True


def checkpoints_to_delete(folder: str | Path, keep: int, keep_best: bool = True) -> list[Path]:
    """The retention rule, in one place: every checkpoint but the newest `keep` (keep >= 1) and,
    with keep_best, the one best.json names. The newest is always kept: resume takes it."""
    found = list_checkpoints(folder)
    spared = {step for step, _ in found[-max(1, keep):]}
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
        raise RunOwnedError(f"{run_dir} is being trained by {owner.describe()}; stop the run before deleting "
                            f"its old checkpoints")
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


# ---------------------------------------------------------------------------------------------
# Writing: every file of a run folder goes through atomic_write


def atomic_write(path: str | Path, data: bytes | str | Callable[[BinaryIO], None]) -> Path:
    """Write `data` (bytes, text as UTF-8, or a callback that writes into a binary file) to `path`
    so that a reader, or a crash at any moment (even SIGKILL), sees the old file or the new one,
    never a part: a temporary file in the same folder, fsync, os.replace, then fsync the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # pid (so prune can tell a dead writer's leftovers) + a random part (two threads, one file)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(temporary, "wb") as file:
            if callable(data):
                data(file)
            else:
                file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # only still there if the write failed
    _fsync_directory(path.parent)
    return path


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (some file systems lose it on power loss otherwise)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def remove_stale_temporaries(folder: str | Path) -> None:
    """Delete temporary files that atomic_write left behind in a process that died mid-write."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        match = _TEMPORARY_NAME.match(entry.name)
        if match and not process_alive(int(match.group("pid"))):
            entry.unlink(missing_ok=True)


def write_config(run_dir: str | Path, config: Any) -> Path:
    """config.yaml: every key of a TrainConfig (or a dict already validated into one)."""
    from trainer.config.safe_yaml import dump_yaml

    data = dict(config) if isinstance(config, Mapping) else config.to_dict()
    return atomic_write(config_path(run_dir), dump_yaml(data))


def read_config(run_dir: str | Path) -> dict:
    """config.yaml as a dict; {} when it is missing or unreadable (a listing must not fail)."""
    from trainer.config.safe_yaml import YamlError, load_yaml_file

    try:
        return load_yaml_file(config_path(run_dir))
    except (YamlError, OSError):
        return {}


# ---------------------------------------------------------------------------------------------
# The run's name and notes: what a person wrote about it (never read by the trainer)

MAX_RUN_NAME_CHARS = 80
MAX_RUN_NOTES_CHARS = 4000
_NOTES_READ_LIMIT = 64 * 1024  # a hand-edited notes.json larger than this is ignored, not read


@dataclass(frozen=True)
class RunNotes:
    """A run's name (one short line, shown in the runs table and the status line) and its notes."""

    name: str = ""
    notes: str = ""


def _control_character(text: str, allowed: str = "") -> str | None:
    """The first control character of `text` (not counting `allowed`), as U+XXXX, or None."""
    for position, character in enumerate(text):
        if character not in allowed and (ord(character) < 32 or 127 <= ord(character) < 160
                                         or character in "\u2028\u2029"):
            return f"U+{ord(character):04X} at character {position + 1}"
    return None


def check_run_notes(name: object, notes: object) -> RunNotes:
    """`name` and `notes` as a RunNotes, or ValueError saying what is wrong and how to fix it.
    The name is one line of at most MAX_RUN_NAME_CHARS, the notes at most MAX_RUN_NOTES_CHARS;
    neither may hold control characters (notes may hold line breaks and tabs)."""
    name = "" if name is None else name
    notes = "" if notes is None else notes
    if not isinstance(name, str) or not isinstance(notes, str):
        raise ValueError("The name and the notes must be text.")
    name, notes = name.strip(), notes.replace("\r\n", "\n").strip()
    if len(name) > MAX_RUN_NAME_CHARS:
        raise ValueError(f"The name is {len(name):,} characters long; a name is at most {MAX_RUN_NAME_CHARS} "
                         "(put longer text in the notes).")
    if len(notes) > MAX_RUN_NOTES_CHARS:
        raise ValueError(f"The notes are {len(notes):,} characters long; notes are at most "
                         f"{MAX_RUN_NOTES_CHARS:,}. Shorten them.")
    bad = _control_character(name)
    if bad:
        raise ValueError(f"The name holds a control character ({bad}); a name is one line of plain text.")
    bad = _control_character(notes, allowed="\n\t")
    if bad:
        raise ValueError(f"The notes hold a control character ({bad}); use plain text (line breaks are fine).")
    return RunNotes(name=name, notes=notes)


def read_run_notes(run_dir: str | Path) -> RunNotes:
    """notes.json of a run folder; an empty RunNotes when it is missing, too large or invalid
    (a listing must not fail on a hand-edited file)."""
    path = Path(run_dir) / NOTES_FILE
    try:
        if path.stat().st_size > _NOTES_READ_LIMIT:
            return RunNotes()
        data = json.loads(path.read_text(encoding="utf-8"))
        return check_run_notes(data.get("name"), data.get("notes"))
    except (OSError, ValueError, AttributeError):
        return RunNotes()


def write_run_notes(run_dir: str | Path, name: object, notes: object) -> RunNotes:
    """Check and store a run's name and notes (ValueError as `check_run_notes` says)."""
    checked = check_run_notes(name, notes)
    atomic_write(Path(run_dir) / NOTES_FILE, json.dumps(asdict(checked), ensure_ascii=False))
    return checked


# ---------------------------------------------------------------------------------------------
# The owner file: one process trains in a run folder at a time


class RunOwnedError(RuntimeError):
    """Another live process trains in this run folder."""


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine."""
    if pid == os.getpid():
        return True
    try:
        import psutil

        return bool(psutil.pid_exists(pid))
    except ImportError:  # psutil is a requirement, but a listing must not fail without it
        try:
            os.kill(pid, 0)
        except PermissionError:
            return True
        except (OSError, ValueError):
            return False
        return True


def _process_started(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 - no psutil, or no such process
        return None


@dataclass(frozen=True)
class RunOwner:
    """Who trains in a run folder: written to owner.json when training starts, removed at the end."""

    pid: int
    host: str
    started_at: float                 # when it took the folder (unix seconds)
    process_started: float | None     # the process's own start time: tells a reused pid apart

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"process {self.pid} on host {self.host}, training since {when}"

    def is_alive(self) -> bool:
        """True while the owner lives. An owner on another host cannot be checked from here, so it
        counts as alive (delete owner.json by hand if you know that process is gone)."""
        if self.host != socket.gethostname():
            return True
        if not process_alive(self.pid):
            return False
        started = _process_started(self.pid)
        return self.process_started is None or started is None or abs(started - self.process_started) < 2.0

    def release(self, run_dir: str | Path) -> None:
        """Remove owner.json, if it still names this owner."""
        if read_owner(run_dir) == self:
            (Path(run_dir) / OWNER_FILE).unlink(missing_ok=True)


def read_owner(run_dir: str | Path) -> RunOwner | None:
    try:
        data = json.loads((Path(run_dir) / OWNER_FILE).read_text(encoding="utf-8"))
        return RunOwner(pid=int(data["pid"]), host=str(data["host"]), started_at=float(data["started_at"]),
                        process_started=None if data.get("process_started") is None
                        else float(data["process_started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_owner(run_dir: str | Path) -> RunOwner | None:
    """The process training in `run_dir` now, or None (no owner file, or its process is gone)."""
    owner = read_owner(run_dir)
    return owner if owner is not None and owner.is_alive() else None


def take_ownership(run_dir: str | Path) -> RunOwner:
    """Make this process the owner of `run_dir` (replacing a dead owner's file); RunOwnedError
    names the live owner otherwise. Release with `owner.release(run_dir)` when training ends."""
    run_dir = Path(run_dir)
    pid = os.getpid()
    owner = RunOwner(pid=pid, host=socket.gethostname(), started_at=time.time(), process_started=_process_started(pid))
    for _ in range(3):
        current = read_owner(run_dir)
        if current is not None and current.is_alive() and current.pid != pid:
            raise RunOwnedError(f"{run_dir} is being trained by {current.describe()}; stop that run first (or wait "
                                f"for it to end), or delete {run_dir / OWNER_FILE} if you know it is gone")
        # Written whole under a temporary name, then linked into place: os.link fails if another
        # process linked its owner file first, so exactly one of two racing writers wins.
        staged = atomic_write(run_dir / f".{OWNER_FILE}.{pid}.{uuid.uuid4().hex[:8]}", json.dumps(asdict(owner)))
        try:
            if current is not None:
                (run_dir / OWNER_FILE).unlink(missing_ok=True)  # a dead owner's, or our own earlier one
            os.link(staged, run_dir / OWNER_FILE)
            return owner
        except FileExistsError:
            continue  # someone else took it in between: look again who
        finally:
            staged.unlink(missing_ok=True)
    raise RunOwnedError(f"{run_dir}: could not take {OWNER_FILE} (other processes keep taking it)")


# ---------------------------------------------------------------------------------------------
# The status rule


def run_status(end_status: str | None, owner_alive: bool, started: bool, stopping: bool = False) -> str:
    """The one rule for a run's state, for a run the studio started and one found on disk alike.

    end_status: the status of the `end` event that closed the latest segment (None if none did);
    owner_alive: the process that trains it lives (the studio's own child, or owner.json's pid);
    started: the latest segment's `start` event was seen; stopping: a stop was asked for.
    """
    if end_status is not None:
        return end_status if end_status in END_STATUSES else "failed"
    if not owner_alive:
        return "interrupted"
    if stopping:
        return "stopping"
    return "running" if started else "starting"


def holds_a_run(run_dir: Path, config: Any) -> bool:
    """The folder already has events or checkpoints of a run (so training into it is a resume)."""
    metrics = events_path(run_dir)
    return (metrics.is_file() and metrics.stat().st_size > 0) or bool(
        list_checkpoints(checkpoint_folder(run_dir, config)))
