"""The docs' "use the model" snippet (docs/studio.md) runs as shown, on a model the trainer just wrote."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from trainer import PPO

ROOT = Path(__file__).resolve().parents[1]


def _snippet_after(marker: str) -> str:
    page = (ROOT / "docs" / "studio.md").read_text(encoding="utf-8")
    after = page[page.index(marker) :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_the_use_the_model_snippet_runs_as_shown(tmp_path):
    model = PPO("cartpole", num_envs=8, num_steps=16, mini_batch_size=32, update_epochs=1, device="cpu", gif_interval=0)
    model.learn(total_timesteps=256)
    final = model.save(tmp_path / "cartpole_ppo_final.pth")  # the name the studio's download has

    completed = subprocess.run(
        [sys.executable, "-c", _snippet_after("Use the model anywhere")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )

    assert Path(final).exists()
    assert completed.returncode == 0, completed.stderr
    assert re.fullmatch(r"return \d+\n", completed.stdout), completed.stdout
