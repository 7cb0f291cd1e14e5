"""The one "Did you mean ...?" rule: env names, env options, config keys and choices."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# How alike (difflib's ratio) a name and a known one must be for "Did you mean ...?". Typos score
# 0.85-0.95 (`flapy_bird`, `Acrobat-v1`, `grdi_size`); at difflib's default 0.6, unrelated names
# got confident advice (`NotAnEnv-v9` -> 'Snake-v0' at 0.53).
CLOSE_ENOUGH = 0.75


def closest_name(word: object, candidates: Iterable[str]) -> str | None:
    """The known name `word` was probably meant to be, or None when none is close.

    The one rule for every "Did you mean ...?" (env names, env options, config keys, choices):
    case-insensitive, a difflib ratio of at least CLOSE_ENOUGH, else a known name of 4+ letters
    that contains the word or is contained in it (`timesteps` -> `total_timesteps`).
    """
    text = str(word)[:64].strip().lower()
    spelled = {}
    for candidate in candidates:
        spelled.setdefault(candidate.lower(), candidate)
    close = difflib.get_close_matches(text, list(spelled), n=1, cutoff=CLOSE_ENOUGH)
    if close:
        return spelled[close[0]]
    if len(text) >= 4:
        for lowered, candidate in spelled.items():
            if len(lowered) >= 4 and (text in lowered or lowered in text):
                return candidate
    return None


def did_you_mean(word: object, candidates: Iterable[str], prefix: str = "") -> str:
    """' Did you mean 'x'?' for the closest name (with `prefix` before it), else ''."""
    close = closest_name(word, candidates)
    return f" Did you mean {prefix + close!r}?" if close else ""
