"""The page: the title and the tabs, Train (form and live view), Runs (history, compare, resume,
delete), Evaluate, Watch, each laid out and wired by its own module (studio/train_tab.py,
runs_tab.py, evaluate_tab.py, watch.py), and the HTTP API (studio/http_api.py); launch options.

All shared state lives in the `RunManager`; each browser session keeps only which run it shows
and what it has already drawn (a `gr.State`), so unchanged charts and files are skipped
(`gr.skip()`) instead of being redrawn or copied into Gradio's cache again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import gradio as gr

from studio.callbacks import Studio
from studio.evaluate_tab import build_evaluate_tab, wire_evaluate_tab
from studio.form import FORM_FIELDS, form_values, tuned_config
from studio.handlers import DEFAULT_ENV, PRIVATE
from studio.http_api import register_api
from studio.run_view import warm_in_background
from studio.runs import RunManager
from studio.runs_layout import build_runs_tab
from studio.runs_tab import wire_runs_tab
from studio.scratch import ScratchFolder
from studio.sweeps_tab import build_sweeps_tab
from studio.system import SystemMonitor, available_devices
from studio.train_tab import build_train_tab, wire_train_tab
from studio.uploads import DEFAULT_MAX_UPLOAD, keep_uploads_in
from trainer.cluster.nodes import DEFAULT_PORT

__all__ = ["build_app", "launch", "launch_options"]

SESSION_CAPACITY = 200  # browser sessions whose state Gradio keeps (Gradio's default: 10,000)
SESSION_SECONDS = 6 * 3600  # a tab's state is dropped this long after its last update

CSS = """
.gradio-container {max-width: 1500px !important}
#studio-title h1 {margin-bottom: 0}
#studio-title p {margin-top: 2px; color: var(--body-text-color-subdued)}
.run-status {padding: 10px 14px; border: 1px solid var(--border-color-primary); border-radius: 10px;
  background: var(--block-background-fill)}
.run-status .status-row {display: flex; flex-wrap: wrap; gap: 10px; align-items: baseline}
.run-status .run-name {font-family: var(--font-mono); font-size: 0.95em}
.run-status .run-title {font-weight: 600}
.run-status .facts {color: var(--body-text-color-subdued)}
.run-status .badge {padding: 2px 10px; border-radius: 999px; font-weight: 600; font-size: 0.9em;
  background: #e5e7eb; color: #374151}
.badge.running, .badge.starting {background: #dbeafe; color: #1d4ed8}
.badge.stopping {background: #fef3c7; color: #92400e}
.badge.finished {background: #dcfce7; color: #166534}
.badge.stopped {background: #f3f4f6; color: #374151}
.badge.failed, .badge.interrupted {background: #fee2e2; color: #991b1b}
.run-status .progress {height: 8px; margin-top: 8px; background: #e5e7eb; border-radius: 999px; overflow: hidden}
.run-status .progress-fill {height: 100%; background: linear-gradient(90deg, #2563eb, #16a34a);
}
.run-status .run-error {margin-top: 8px; color: #991b1b; font-weight: 600}
.run-status .run-traceback {margin-top: 6px; max-height: 220px; overflow: auto; font-size: 0.8em;
  background: #fef2f2; padding: 8px; border-radius: 6px}
#train-message p, #runs-message p, #eval-message p {margin: 4px 0}
#rollout-gif img {image-rendering: pixelated; object-fit: contain}
.gif-caption {font-size: 0.9em; color: var(--body-text-color-subdued); padding: 2px 4px}
.log-box {height: 340px; overflow-y: auto; display: flex; flex-direction: column-reverse;
  border: 1px solid var(--border-color-primary); border-radius: 8px; background: var(--block-background-fill)}
.log-box pre {margin: 0; padding: 8px 10px; font-family: var(--font-mono); font-size: 0.78em;
  white-space: pre-wrap; word-break: break-word}
.log-title {font-weight: 600; font-size: 0.9em; margin-bottom: 4px}
.field-group-title p {margin: 10px 0 0 0; font-size: 0.95em}
#batch-note p {margin: 2px 0; font-size: 0.85em; color: var(--body-text-color-subdued)}
/* A phone (390 px): the diagnostics grid (4 charts a row) keeps a width where its titles fit, and scrolls
   sideways inside its box instead of squeezing them into one another. */
@media (max-width: 720px) {
  #diagnostics-plot, #runs-diagnostics-plot {overflow-x: auto}
  #diagnostics-plot .js-plotly-plot, #runs-diagnostics-plot .js-plotly-plot {min-width: 640px}
  #studio-title h1 {font-size: 1.5em}
}
.run-status .run-score {font-size: 1.15em}
.cluster-panel {padding: 8px 12px; border: 1px solid var(--border-color-primary); border-radius: 10px}
.cluster-panel table {width: 100%; font-size: 0.85em} .cluster-panel tr.lost {color: #991b1b}
.cluster-panel code {word-break: break-all} .cluster-log {font-size: 0.75em; margin: 6px 0 0 0}
"""


# ----------------------------------------------------------------------------- the page


def build_app(
    manager: RunManager,
    allow_custom_envs: bool = False,
    poll_seconds: float = 1.0,
    monitor: SystemMonitor | None = None,
    scratch: ScratchFolder | None = None,
) -> gr.Blocks:
    """The studio's page over `manager`: the tabs laid out, then wired to one `Studio`."""
    studio = Studio(manager, allow_custom_envs, monitor, poll_seconds, scratch=scratch)
    default_values = dict(zip((f.key for f in FORM_FIELDS), form_values(tuned_config(DEFAULT_ENV))))
    from envs import builtin_env_names

    with gr.Blocks(title="RL Studio", delete_cache=(600, 3600)) as demo:
        live_viewed = gr.State({}, time_to_live=SESSION_SECONDS)
        gr.Markdown(
            "# RL Studio\nTrain a game-playing agent: pick a game, a model and an algorithm, press "
            "**Start**, watch it learn, download the trained model.",
            elem_id="studio-title",
        )
        with gr.Tabs(selected="train") as tabs:
            train = build_train_tab(default_values, available_devices(), builtin_env_names())
            runs = build_runs_tab()
            evaluate = build_evaluate_tab()
            with gr.Tab("Watch", id="watch") as watch_tab:  # studio/watch.py: live play, ONNX, policy server
                from studio.watch import build_watch_tab

                build_watch_tab(manager, allow_custom_envs, studio.scratch, watch_tab)
            build_sweeps_tab(studio, train, tabs, poll_seconds)  # studio/sweeps_tab.py: Optuna sweeps

        timer = gr.Timer(poll_seconds, active=False)  # polls the Train tab's live view while its run trains
        wire_train_tab(studio, train, demo, timer, live_viewed)
        # Open and Resume on the Runs tab switch to the Train tab showing that run, and the form
        # follows it (form and live view never disagree).
        follow_run = dict(
            fn=studio.on_follow_run,
            inputs=[runs.run_picker, train.run_box],
            outputs=[*train.form.inputs, train.message],
        )
        runs_events = wire_runs_tab(
            studio,
            runs,
            poll_seconds,
            [train.run_box, timer, live_viewed, tabs],
            follow_run,
            evaluate.run,
            SESSION_SECONDS,
        )
        wire_evaluate_tab(studio, evaluate, runs_events)
        for leave in (train.tab.select, watch_tab.select):
            leave(**runs_events.hide, **PRIVATE)
        register_api(studio)
    demo.studio = studio  # type: ignore[attr-defined]  (tests reach the RunManager through it)
    return demo


@contextlib.contextmanager
def web_app_made_once() -> Iterator[None]:
    """Gradio makes its web app (FastAPI: about 80 routes whose signatures it inspects, and the
    page's config) when a Blocks is made, again when it closes, again at queue(), and at launch(),
    whose app alone is served. Inside this block the first three are not made: a third of the
    time from `python app.py` to the page answering goes to building the page."""
    from gradio.routes import App

    make = App.__dict__["create_app"]
    App.create_app = staticmethod(lambda *args, **kwargs: None)
    try:
        yield
    finally:
        App.create_app = make


def launch_options(
    host: str, port: int, auth: tuple[str, str] | None, allowed_paths: list[str], max_upload_size: str | int
) -> dict:
    """Blocks.launch keywords: files served only from the runs folder, bounded session state and
    uploads, failed logins (page and /metrics) throttled per client address and user name."""
    from starlette.middleware import Middleware

    from studio.throttle import LoginThrottle
    from studio.uploads import UploadLimit, parse_size

    max_bytes = parse_size(max_upload_size)
    return dict(
        server_name=host,
        server_port=port,
        auth=auth,
        css=CSS,
        theme=gr.themes.Soft(),
        allowed_paths=allowed_paths,
        max_file_size=max_bytes,
        footer_links=["api"],
        show_error=False,
        state_session_capacity=SESSION_CAPACITY,
        app_kwargs={"middleware": [Middleware(LoginThrottle), Middleware(UploadLimit, max_bytes=max_bytes)]},
    )


QUEUE_IDLE_SECONDS = 0.05  # how often Gradio's queue looks for a new event while it has none
PROGRESS_IDLE_SECONDS = 0.2  # ... and for progress to send (the studio shows no progress bars)


def quiet_when_idle(demo: gr.Blocks) -> None:
    """An idle studio (no page, no run) does next to no work: Gradio's queue looks for new events
    every millisecond while it has none (about 7% of a core on its own), here every 50 ms (an
    event waits at most that long to start). The page's timers run only while a run trains."""
    queue = demo._queue  # noqa: SLF001 - Gradio has no option for it; tests/test_studio_idle.py pins it
    queue.sleep_when_free = max(queue.sleep_when_free, QUEUE_IDLE_SECONDS)
    queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free, PROGRESS_IDLE_SECONDS)


def startup_line(url: str, runs_dir) -> str:
    """The one line the console shows once the studio answers."""
    return f"RL Studio is running on {url} (runs folder: {runs_dir}). Press Ctrl-C to stop it."


def launch(
    host: str = "127.0.0.1",
    port: int = 7860,
    runs_dir: str = "runs",
    auth: tuple[str, str] | None = None,
    max_concurrent_runs: int = 16,
    slots: int | None = None,
    allow_custom_envs: bool = False,
    poll_seconds: float = 1.0,
    max_upload_size: str | int = DEFAULT_MAX_UPLOAD,
    cluster_host: str = "127.0.0.1",
    cluster_port: int = DEFAULT_PORT,
    scratch: ScratchFolder | None = None,
) -> None:
    """Build the studio and serve it until Ctrl-C; running trainers are then stopped (saving models).
    scratch: the studio's scratch folder, when the caller made it (and pointed Gradio's uploads into
    it) before importing gradio, as app.py does."""
    scratch = scratch or ScratchFolder()
    keep_uploads_in(scratch)  # before the page is built: each component reads GRADIO_TEMP_DIR when made
    manager = RunManager(
        runs_dir,
        max_concurrent_runs=max_concurrent_runs,
        slots=slots,
        allow_custom_envs=allow_custom_envs,
        cluster_host=cluster_host,
        cluster_port=cluster_port,
        start_fork_server_now=False,  # after the page answers: its imports (torch) would slow the page's
    )
    with web_app_made_once():  # launch() below makes the app it serves
        demo = build_app(manager, allow_custom_envs=allow_custom_envs, poll_seconds=poll_seconds, scratch=scratch)
        demo.queue(default_concurrency_limit=4)
    quiet_when_idle(demo)
    try:
        options = launch_options(host, port, auth, [str(manager.runs_dir)], max_upload_size)
        from studio.metrics import metrics_route  # GET /metrics (Prometheus), same --auth as the page

        options["app_kwargs"]["routes"] = [metrics_route(manager, auth)]
        # quiet: Gradio's own start lines end with "To create a public link, set `share=True`",
        # advice that is wrong here (a share link would expose the studio to the internet).
        demo.launch(quiet=True, prevent_thread_lock=True, **options)
        print(startup_line(demo.local_url, manager.runs_dir), flush=True)
        # Once the page answers (torch is not imported before): what the first run needs, so that
        # pressing Start does not wait for it.
        manager.start_fork_server()
        warm_in_background()
        demo.block_thread()
    finally:
        manager.shutdown()
