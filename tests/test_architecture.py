"""The house's rules, checked: imports go one way (the import-linter contracts in pyproject.toml),
and every room is small enough to read (no file in envs/, trainer/ or studio/ over 400 lines)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def test_no_file_in_envs_trainer_or_studio_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): count
        for path in sorted(ROOT.glob("*/**/*.py"))
        if path.relative_to(ROOT).parts[0] in ("envs", "trainer", "studio")
        and (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these along their ideas (at most {MAX_LINES} lines a file): {long}"


def test_the_import_contracts_hold():
    command = shutil.which("lint-imports")
    if command is None:
        pytest.skip("import-linter is not installed (.ci/run installs it)")
    done = subprocess.run([command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_planted_import_circle_is_caught(tmp_path):
    """The contracts can fail: a copy of the config room with two modules importing each other."""
    command = shutil.which("lint-imports")
    if command is None:
        pytest.skip("import-linter is not installed (.ci/run installs it)")
    copy = tmp_path / "repo"
    for name in ("trainer", "studio", "envs"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / "trainer" / "config" / "circle_a.py").write_text("from trainer.config import circle_b\n")
    (copy / "trainer" / "config" / "circle_b.py").write_text("from trainer.config import circle_a\n")
    done = subprocess.run(
        [command],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "PYTHONPATH": str(copy)},
    )
    assert done.returncode != 0 and "circle_a" in done.stdout, done.stdout[-2000:]
