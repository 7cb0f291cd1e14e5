"""The Watch tab: the current policy of a run (running or finished) playing its game live, and
the ways out of the studio for that policy: an ONNX file to download and a policy server.

The player runs in the studio process, never in the trainer's: it loads the run's newest model
file (the final model, else the newest checkpoint) and looks for a newer one every few
seconds, so a running run's agent improves on screen as checkpoints land. Frames go to the
browser as JPEG in a streamed HTML component, paced at the game's frame rate
(`metadata["render_fps"]`), for as long as the tab watches (Gradio cancels the stream when the
tab closes or Stop is pressed). One torch thread and small JPEGs keep the cost to a few percent
of one core, so a training run beside it keeps its speed (benchmarks/watch_overhead.py).
"""

from __future__ import annotations

import base64
import html
import io
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gradio as gr  # at module level: Gradio reads the handlers' `gr.Request` hints from these globals
import numpy as np

from studio.runs import RunError
from studio.scratch import ScratchFolder
from studio.watch_stream import stream_frames, wait_for_player
from trainer.config.permissions import CodePermissionError, require_code_permission

RELOAD_SECONDS = 5.0  # how often a newer checkpoint is looked for
MAX_FPS = 60  # games faster than this are shown at this rate
JPEG_QUALITY = 80
MAX_SERVERS = 4  # policy servers the studio starts (each holds a port and a model)


class WatchError(Exception):
    """The run cannot be watched or exported; the message says why, for people."""


class NoModelYet(WatchError):
    """The run has no model file yet (before its first checkpoint): Watch waits for one."""


@dataclass(frozen=True)
class WatchFrame:
    jpeg: bytes
    score: float
    episode_return: float
    episode: int
    best_score: float
    model_step: int
    model_name: str
    fps: float


def encode_jpeg(frame: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


class LivePlayer:
    """The newest policy of a run, playing one env of its game, a frame at a time."""

    def __init__(self, run_dir: str | Path, allow_custom_envs: bool = False, seed: int = 0):
        import torch

        from trainer.serving.export import ExportError, resolve_model_path

        torch.set_num_threads(1)  # leave the cores to the trainers
        self.run_dir = Path(run_dir)
        self.allow_custom_envs = allow_custom_envs
        try:
            self.model_path = resolve_model_path(self.run_dir)
        except ExportError:
            raise NoModelYet(
                f"Run {self.run_dir.name} has no model yet: it plays once its first checkpoint "
                f"(checkpoint.interval) or its final model is written."
            ) from None
        self.model = self._load(self.model_path)
        self.model_mtime = self.model_path.stat().st_mtime
        config = self.model.config
        try:
            require_code_permission(
                config, allow_custom_envs, self.model_path.name, "`python app.py --allow-custom-envs`"
            )
        except CodePermissionError as error:
            raise WatchError(f"This run's environment cannot be loaded here: {error}") from None
        from envs import make_vec_env
        from envs.registry import played_env_kwargs

        try:
            self.env = make_vec_env(
                config["env_name"],
                1,
                device="cpu",
                seed=seed,
                wrappers=config.get("wrappers") or None,
                **played_env_kwargs(config["env_name"], config.get("env_kwargs")),  # the game, not its curriculum
            )
        except Exception as error:  # noqa: BLE001 - a broken env: say so, do not crash the tab
            raise WatchError(f"Could not make {config.get('env_name')!r}: {type(error).__name__}: {error}") from None
        self.fps = float(min(MAX_FPS, max(1, (getattr(self.env, "metadata", {}) or {}).get("render_fps") or 30)))
        self.obs = self.env.reset(seed=seed)
        self.state = self.episode_start = None  # a recurrent policy's state, carried from step to step
        self.episode, self.episode_return, self.best_score = 1, 0.0, float("-inf")
        self.last_reload_check = time.monotonic()

    @staticmethod
    def _load(path: Path):
        from trainer.run.checkpoint import CheckpointError, load_model

        try:
            return load_model(path, device="cpu")
        except CheckpointError as error:
            raise WatchError(f"Could not use {path.name}: {error}") from None

    def maybe_reload(self) -> None:
        """Switch to a newer model file of the run, if one has appeared (a checkpoint or the final model)."""
        from trainer.serving.export import ExportError, resolve_model_path

        self.last_reload_check = time.monotonic()
        try:
            path = resolve_model_path(self.run_dir)
            mtime = path.stat().st_mtime
        except (ExportError, OSError):
            return  # pruned between listing and reading: try again later
        if (path, mtime) != (self.model_path, self.model_mtime):
            try:
                model = self._load(path)
            except WatchError:
                return  # half-written or damaged: keep playing the one we have
            self.model, self.model_path, self.model_mtime = model, path, mtime
            self.state = None  # the old weights' memory means nothing to the new ones

    def step(self) -> WatchFrame:
        """Render the current state, then act and advance the game one step."""
        import torch

        if time.monotonic() - self.last_reload_check > RELOAD_SECONDS:
            self.maybe_reload()
        frame = self.env.render(0)
        score = float(self.env.game_score()[0])
        shown = WatchFrame(
            jpeg=encode_jpeg(frame),
            score=score,
            episode_return=self.episode_return,
            episode=self.episode,
            best_score=max(self.best_score, score),
            model_step=self.model.global_step,
            model_name=self.model_path.name,
            fps=self.fps,
        )
        with torch.no_grad():
            masks = self.env.action_masks()  # Snake's forbidden moves (None for games without any)
            action, self.state = self.model.predict(
                self.obs, deterministic=True, state=self.state, episode_start=self.episode_start, action_masks=masks
            )
            self.obs, reward, terminated, truncated, _ = self.env.step(torch.as_tensor(action))
        self.episode_start = (terminated | truncated).numpy()  # reset there: a new episode next step
        self.episode_return += float(reward[0])
        if bool((terminated | truncated)[0]):
            self.best_score = max(self.best_score, float(self.env.stats.finished[2][0]))
            self.episode, self.episode_return = self.episode + 1, 0.0
        return shown

    def frames(self, should_stop: Callable[[], bool] = lambda: False) -> Iterator[WatchFrame]:
        """Frames at the game's frame rate until `should_stop()` (a slow consumer drops none: the pace resets)."""
        period = 1.0 / self.fps
        due = time.monotonic()
        try:
            while not should_stop():
                yield self.step()
                due += period
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    due = time.monotonic()  # behind: do not rush to catch up
        finally:
            self.close()

    def close(self) -> None:
        self.env.close()


def frame_html(frame: WatchFrame | None, message: str = "") -> str:
    if frame is None:
        return (
            f'<div id="watch-view" class="watch-idle"><p>{html.escape(message or "Pick a run and press Watch.")}'
            f"</p></div>"
        )
    source = base64.b64encode(frame.jpeg).decode()
    best = "" if not np.isfinite(frame.best_score) else f" · best <b>{frame.best_score:g}</b>"
    return (
        f'<div id="watch-view"><img id="watch-frame" alt="the agent playing" '
        f'src="data:image/jpeg;base64,{source}" style="max-width:100%;image-rendering:pixelated">'
        f'<div id="watch-score">Score <b class="watch-score-value">{frame.score:g}</b> · return '
        f"{frame.episode_return:.1f} · episode {frame.episode}{best} · {frame.fps:g} fps · model "
        f"{html.escape(frame.model_name)} (step {frame.model_step:,})</div></div>"
    )


# ---------------------------------------------------------------------------------------------
# ONNX and the policy server, for the studio's buttons


def export_run_onnx(run_dir: str | Path, scratch: ScratchFolder) -> Path:
    """The run's newest model as ONNX, in the studio's own scratch folder (private to it, removed
    at exit; only the newest few exports are kept), from where Gradio serves the download."""
    from trainer.run.checkpoint import CheckpointError
    from trainer.serving.export import ExportError, export_onnx, resolve_model_path

    try:
        source = resolve_model_path(run_dir)
        return export_onnx(source, scratch.file("onnx", f"{Path(run_dir).name}_{source.stem}.onnx"))
    except (ExportError, CheckpointError) as error:
        raise WatchError(str(error)) from None


class PolicyServers:
    """Policy servers started from the studio: one per run, loopback only, at most MAX_SERVERS."""

    def __init__(self):
        self.lock = threading.Lock()
        self.servers: dict[str, object] = {}

    def start(self, run_id: str, run_dir: str | Path) -> str:
        from trainer.run.checkpoint import CheckpointError
        from trainer.serving.export import ExportError
        from trainer.serving.serve import ServeError, start_server

        with self.lock:
            if run_id in self.servers:
                return self.servers[run_id].url
            if len(self.servers) >= MAX_SERVERS:
                raise WatchError(f"{MAX_SERVERS} policy servers are running already; stop one first.")
            try:
                # Loopback only: a server reachable from elsewhere needs a key (`python -m trainer serve`).
                server = start_server(run_dir, host="127.0.0.1", port=0)
            except (ServeError, ExportError, CheckpointError) as error:
                raise WatchError(str(error)) from None
            self.servers[run_id] = server
            return server.url

    def stop(self, run_id: str) -> bool:
        with self.lock:
            server = self.servers.pop(run_id, None)
        if server is not None:
            server.stop()
        return server is not None

    def stop_all(self) -> None:
        for run_id in list(self.servers):
            self.stop(run_id)


def server_message(url: str, run_id: str) -> str:
    return (
        f"Policy server for **{run_id}** at `{url}` (this machine only).\n\n"
        f"```\ncurl -s {url}/v1/model\ncurl -s -X POST {url}/v1/act -H 'Content-Type: application/json' "
        f'-d \'{{"obs": [...], "deterministic": true}}\'\n```'
    )


# ---------------------------------------------------------------------------------------------
# The tab


def build_watch_tab(manager, allow_custom_envs: bool, scratch: ScratchFolder, tab=None) -> dict:
    """Build the Watch tab's components (call inside `with gr.Tab(...)`) and wire their events.

    manager: the studio's RunManager (its runs are offered); scratch: the studio's scratch folder
    (ONNX exports); tab: the gr.Tab, whose select refreshes the run list. Returns the components
    by name (tests, layout)."""

    servers = PolicyServers()
    private = dict(api_visibility="private")

    def run_choices(current: str | None = None):
        runs = [snapshot.run_id for snapshot in manager.list_runs()]
        return gr.Dropdown(runs, value=current if current in runs else (runs[0] if runs else None))

    def run_dir_of(run_id: str | None) -> Path:
        if not run_id:
            raise WatchError("Pick a run first.")
        return manager.run_dir(run_id)

    stopped_sessions: set[str] = set()  # Stop pressed: the session's stream ends at its next frame

    def watch(run_id: str | None, request: gr.Request):
        session = getattr(request, "session_hash", None) or ""
        stopped_sessions.discard(session)

        def training() -> bool:  # no model yet: worth waiting for while the run trains
            try:
                return session not in stopped_sessions and manager.get(run_id).is_active
            except RunError:  # deleted meanwhile
                return False

        try:
            make_player = lambda: LivePlayer(run_dir_of(run_id), allow_custom_envs)  # noqa: E731
            for found in wait_for_player(make_player, training, NoModelYet):
                if isinstance(found, str):
                    yield frame_html(None, found)
                else:
                    player = found
        except (WatchError, ValueError) as error:
            yield frame_html(None, str(error))
            return
        frames = stream_frames(player)
        try:
            for frame in frames:
                if session in stopped_sessions:
                    break
                yield frame_html(frame)
        finally:
            frames.close()
        stopped_sessions.discard(session)
        yield frame_html(None, "Stopped.")

    def on_stop(request: gr.Request) -> str:
        stopped_sessions.add(getattr(request, "session_hash", None) or "")
        return frame_html(None, "Stopped.")

    def on_export(run_id: str | None):
        try:
            path = export_run_onnx(run_dir_of(run_id), scratch)
        except (WatchError, ValueError) as error:
            return gr.DownloadButton(visible=False), f"Could not export: {error}"
        return (
            gr.DownloadButton(f"Download {path.name}", value=str(path), visible=True, interactive=True),
            f"Exported **{path.name}**: input `obs` (batch, ...) raw observations, output `action`.",
        )

    def on_start_server(run_id: str | None) -> str:
        try:
            return server_message(servers.start(run_id or "", run_dir_of(run_id)), run_id)
        except (WatchError, ValueError) as error:
            return f"Could not start a policy server: {error}"

    def on_stop_server(run_id: str | None) -> str:
        return f"Stopped the policy server of {run_id}." if servers.stop(run_id or "") else "No server for this run."

    with gr.Row():
        run_picker = gr.Dropdown([], label="Run", scale=3, elem_id="watch-run")
        refresh = gr.Button("Refresh", size="sm", scale=0, min_width=100, elem_id="watch-refresh")
        watch_button = gr.Button("Watch", variant="primary", scale=1, elem_id="watch-start")
        stop_button = gr.Button("Stop watching", scale=1, elem_id="watch-stop")
    view = gr.HTML(frame_html(None), elem_id="watch-panel")
    with gr.Accordion("Use it in a game", open=False, elem_id="watch-deploy"):
        with gr.Row():
            export_button = gr.Button("Export ONNX", size="sm", elem_id="watch-export")
            download = gr.DownloadButton("Download .onnx", visible=False, size="sm", elem_id="watch-download-onnx")
            serve_button = gr.Button("Start policy server", size="sm", elem_id="watch-serve")
            unserve_button = gr.Button("Stop policy server", size="sm", elem_id="watch-unserve")
        deploy_message = gr.Markdown(elem_id="watch-deploy-message")

    refresh.click(run_choices, run_picker, run_picker, **private)
    if tab is not None:
        tab.select(run_choices, run_picker, run_picker, **private)
    # Its own queue lane: a watcher holds its worker for as long as it watches.
    watching = watch_button.click(
        watch, run_picker, view, show_progress="hidden", concurrency_limit=4, concurrency_id="watch", **private
    )
    # Stop does not wait in the queue behind busy workers: it marks the session, and the stream
    # ends at its next frame (cancels= as well, for a stream that is between frames).
    stop_button.click(on_stop, None, view, cancels=[watching], queue=False, **private)
    export_button.click(on_export, run_picker, [download, deploy_message], **private)
    serve_button.click(on_start_server, run_picker, deploy_message, **private)
    unserve_button.click(on_stop_server, run_picker, deploy_message, **private)
    return {"run": run_picker, "watch": watch_button, "stop": stop_button, "view": view, "servers": servers}
