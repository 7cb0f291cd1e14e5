"""Helpers (no tests here): start `python app.py` as a subprocess for the server and browser tests.

The studio runs in its own session (process group) so that ending it also ends any trainer
process it spawned: `os.killpg` on the group, never a name-based kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainer.cluster.launch import free_port

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@dataclass
class StudioServer:
    process: subprocess.Popen
    url: str
    runs_dir: Path
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        # Trainers in the same group may outlive the app by a moment.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def start_studio(runs_dir: Path, log_path: Path, *extra_args: str, timeout: float = 90.0) -> StudioServer:
    port = free_port()
    env = dict(
        os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", SDL_VIDEODRIVER="dummy", PYTHONUNBUFFERED="1"
    )
    env.pop("RL_STUDIO_AUTH", None)
    log_file = open(log_path, "ab")
    process = subprocess.Popen(
        [sys.executable, str(REPO / "app.py"), "--port", str(port), "--runs-dir", str(runs_dir), *extra_args],
        cwd=REPO,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = StudioServer(process, f"http://127.0.0.1:{port}", Path(runs_dir), Path(log_path))
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the studio exited with code {process.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(server.url + "/", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"the studio did not answer within {timeout} s:\n{server.log()}")


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@contextmanager
def studio_page(tmp_path: Path, width: int, height: int, **page_options):
    """A served studio (runs under `tmp_path`) and a headless-Chromium page on it, loaded."""
    from playwright.sync_api import sync_playwright

    server = start_studio(tmp_path / "runs", tmp_path / "studio.log")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": width, "height": height}, **page_options)
                page.goto(server.url, wait_until="load")
                page.locator("#start").wait_for()
                yield server, page
            finally:
                browser.close()
    finally:
        server.stop()


@contextmanager
def guarded_app(tmp_path: Path, users: list[tuple[str, str]]):
    """A Gradio app launched the studio's way (launch_options: login throttle, upload limit), with
    --auth `users` (the first one also guards /metrics) and the studio's /metrics route; its URL."""
    import gradio as gr

    from studio.metrics import metrics_route
    from studio.runs import RunManager
    from studio.ui import launch_options

    port, manager = free_port(), RunManager(tmp_path / "runs")
    with gr.Blocks() as demo:
        gr.Markdown("studio")
    options = launch_options("127.0.0.1", port, users[0], [str(tmp_path / "runs")], "1mb")
    options["auth"] = list(users)
    options["app_kwargs"]["routes"] = [metrics_route(manager, users[0])]
    demo.launch(prevent_thread_lock=True, **options)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        demo.close()
        manager.shutdown()


def pick_game(page, env_name: str) -> None:
    """Choose a built-in game in the Train tab's form, as a person does (the form then fills with
    its tuned config; a new page opens on studio/handlers.py DEFAULT_ENV)."""
    page.locator("#field-env-name input").click()
    page.get_by_role("option", name=env_name, exact=True).click()
    page.wait_for_function(
        "() => document.querySelector('#train-message').innerText.includes('Filled the form')", timeout=30_000
    )
