"""A run's name and notes: what a person wrote about it in the studio (never read by the trainer),
kept in notes.json of the run folder and checked the same way on every way in."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.run.files import atomic_write
from trainer.run.layout import notes_path

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
        if character not in allowed and (
            ord(character) < 32 or 127 <= ord(character) < 160 or character in "\u2028\u2029"
        ):
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
        raise ValueError(
            f"The name is {len(name):,} characters long; a name is at most {MAX_RUN_NAME_CHARS} "
            "(put longer text in the notes)."
        )
    if len(notes) > MAX_RUN_NOTES_CHARS:
        raise ValueError(
            f"The notes are {len(notes):,} characters long; notes are at most {MAX_RUN_NOTES_CHARS:,}. Shorten them."
        )
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
    path = notes_path(run_dir)
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
    atomic_write(notes_path(run_dir), json.dumps(asdict(checked), ensure_ascii=False))
    return checked
