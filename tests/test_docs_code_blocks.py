"""The code blocks of the docs pages listed here run as pasted: each in a fresh folder, in a fresh
process (python blocks with `python -c`, bash blocks with bash), one after the other as a reader
would paste them, with the repository importable (as after the Quick start's install)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["docs/algorithms.md"]  # pages whose every block runs as pasted (the others: tests/test_readme_snippets.py)


def code_blocks(page: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced python / bash block of a page, in order."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return re.findall(r"```(python|bash)\n(.*?)```", text, re.S)


@pytest.mark.parametrize("page", PAGES)
def test_every_code_block_runs_as_pasted(page, tmp_path):
    blocks = code_blocks(page)
    assert blocks, f"{page} has no code block"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    for language, code in blocks:
        command = [sys.executable, "-c", code] if language == "python" else ["bash", "-euo", "pipefail", "-c", code]
        # bash blocks name repository paths (configs/...): they run from the repository root.
        completed = subprocess.run(
            command,
            cwd=tmp_path if language == "python" else ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=environment,
        )
        assert completed.returncode == 0, f"{page}: this block failed:\n{code}\n{completed.stderr[-3000:]}"
