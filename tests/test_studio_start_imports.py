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


def test_the_page_is_made_into_a_web_app_once_at_launch(tmp_path, monkeypatch):
    """Gradio makes its web app (FastAPI routes, the page's config) when a Blocks is made, closed,
    queued and launched; the studio skips all but launch's (a third of building the page), and the
    page launched so still answers."""
    import urllib.request

    from gradio.routes import App

    from studio.runs import RunManager
    from studio.ui import build_app, web_app_made_once
    from trainer.cluster.launch import free_port

    made = []
    make = App.create_app

    def counted(*args, **kwargs):
        made.append(1)
        return make(*args, **kwargs)

    monkeypatch.setattr(App, "create_app", staticmethod(counted))
    with web_app_made_once():
        demo = build_app(RunManager(tmp_path / "runs", start_fork_server_now=False))
        demo.queue(default_concurrency_limit=4)
    assert not made
    demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        assert len(made) == 1
        with urllib.request.urlopen(demo.local_url, timeout=30) as page:
            assert page.status == 200 and b"RL Studio" in page.read()
    finally:
        demo.close()
        demo.studio.manager.shutdown()


def test_a_fork_server_that_cannot_start_leaves_trainers_spawned_not_a_dead_studio(tmp_path, monkeypatch, capsys):
    # A long TMPDIR makes the fork server's Unix socket path too long to bind: the studio, which
    # starts the server after its page answers, must go on and spawn its trainers instead.
    import studio.runs
    from studio.runs import RunManager

    def too_long(start_method):
        raise OSError("AF_UNIX path too long")

    monkeypatch.setattr(studio.runs, "start_fork_server", too_long)
    manager = RunManager(tmp_path / "runs", start_method="forkserver", start_fork_server_now=False)
    manager.start_fork_server()
    assert manager._context.get_start_method() == "spawn"
    assert "trainers start without a fork server (AF_UNIX path too long)" in capsys.readouterr().err
    manager.shutdown()
