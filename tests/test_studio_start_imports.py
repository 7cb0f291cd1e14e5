"""The studio's page answers before torch is imported: building it (and `import envs`) must not
import torch, which costs seconds on a small machine (issue 27: page within 5 s of a cold start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BUILD_PAGE = """
import sys
from studio.runs import RunManager
from studio.ui import build_app
import envs
envs.builtin_env_names(), envs.resolve_env_name("CartPole-v1")
build_app(RunManager(sys.argv[1], start_fork_server_now=False))
print("torch imported" if "torch" in sys.modules else "no torch")
"""


def test_building_the_page_does_not_import_torch(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", BUILD_PAGE, str(tmp_path / "runs")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "no torch"


def test_envs_still_hands_out_its_torch_classes():
    import envs

    assert envs.VecEnv.__name__ == "VecEnv" and envs.EpisodeStats.__name__ == "EpisodeStats"
