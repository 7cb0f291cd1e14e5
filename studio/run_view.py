"""One run shown on the page: its components (`RunView`: status line, charts and their controls,
rollout GIF, log, download buttons), laid out once for the Train tab's live view and once for
the Runs tab, and `RunViewHandlers.render_run`, which turns snapshots into their updates.

Unchanged parts are `gr.skip()`, and charts, log and files are redrawn at a bounded pace while a
run trains: redrawing costs the browser, and each new file is another copy in Gradio's cache.
"""

from __future__ import annotations

import html
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import gradio as gr
from gradio.components.plot import PlotData

from studio import views
from studio.charts import MAX_SMOOTHING, ChartOptions, CurveSource, diagnostics_figure, reward_figure
from studio.handlers import DOWNLOAD_KINDS, Handlers, changed_value
from studio.runs import RunSnapshot
from studio.score import game_score
from studio.snapshot import GifInfo
from trainer.config.metrics import csv_columns
from trainer.run.layout import CONFIG_FILE, METRICS_CSV_FILE

FILES_SECONDS = 15.0  # while a run trains, refresh its download buttons at most this often


class RunViewHandlers(Handlers):
    """Renders runs into a RunView's outputs, remembering per session (`viewed`) what it drew."""

    def render_run(
        self,
        run: RunSnapshot | None,
        overlays: Sequence[RunSnapshot],
        viewed: dict,
        with_log: bool,
        chart: ChartOptions | None = None,
    ) -> tuple[list, dict]:
        """Updates for a RunView's outputs; unchanged parts are gr.skip(). `chart`: what the
        main chart shows (the controls above it)."""
        viewed = dict(viewed or {})
        chart = chart or ChartOptions()

        def changed(part: str, key: object) -> bool:
            return changed_value(viewed, part, key)

        if run is None:
            updates = [views.status_html(None)]
            empty = changed("charts", None)
            updates += [plot_data(reward_figure([])) if empty else gr.skip()]
            updates += [gr.Image(value=None) if changed("gif", None) else gr.skip()]
            caption = rollout_caption_html(None, None)
            updates += [caption if changed("gif_caption", caption) else gr.skip()]
            updates += [(views.log_html("") if changed("log", None) else gr.skip())] if with_log else []
            updates += [plot_data(diagnostics_figure([])) if empty else gr.skip()]
            updates += [
                gr.DownloadButton(value=None, interactive=False) if changed(f"file-{kind}", None) else gr.skip()
                for kind in DOWNLOAD_KINDS
            ]
            return updates, viewed

        sources = [run] + [other for other in overlays if other.run_id != run.run_id]
        chart_key = (chart, *((source.run_id, source.update_count, source.status) for source in sources))
        curves = [CurveSource(source.run_id, source.metrics, source.env_name) for source in sources]
        # Redrawing plotly charts costs the browser more than anything else on the page: at most
        # every `chart_seconds` while a shown run trains, and once more when it ends; at once when
        # the runs shown change (a new selection, a run ticked to compare).
        shown_ids = tuple(source.run_id for source in sources)
        runs_shown_changed = viewed.get("charts_runs") != shown_ids
        due = (
            not any(source.is_active for source in sources)
            or runs_shown_changed
            or time.time() - viewed.get("charts_at", 0.0) >= self.chart_seconds
        )
        # The newest rollout, as soon as its gif event is read (each tick reads only what the run's
        # event file gained). The browser draws a response as a whole, and plotly charts take it
        # seconds on a small busy machine: a new picture of a training run goes out without them
        # (`viewed["picture_only"]`), and the charts follow on the next tick; unless the user just
        # changed the runs shown, whose charts come at once, or the last tick was such, so that
        # pictures coming fast never hold the charts back twice in a row.
        gif = run.latest_gif
        gif_path = self._file(gif.path) if gif else None
        new_picture = changed("gif", (run.run_id, gif_path))
        charts_held_last_tick = viewed.get("picture_only", False)
        viewed["picture_only"] = (
            new_picture
            and run.is_active
            and gif_path is not None
            and not runs_shown_changed
            and not charts_held_last_tick
        )
        charts_changed = due and not viewed["picture_only"] and changed("charts", chart_key)
        if charts_changed:
            viewed["charts_at"], viewed["charts_runs"] = time.time(), shown_ids
        updates: list = [views.status_html(run)]
        updates.append(plot_data(reward_figure(curves, **chart.kwargs())) if charts_changed else gr.skip())

        # The caption says how old the picture is, so it is redrawn when that changes.
        updates.append(gr.Image(value=gif_path) if new_picture else gr.skip())
        caption = rollout_caption_html(gif if gif_path else None, run)
        updates.append(caption if changed("gif_caption", caption) else gr.skip())
        if with_log:  # re-rendering the log box is the next cost: at the charts' pace too
            log_due = not run.is_active or time.time() - viewed.get("log_at", 0.0) >= self.chart_seconds
            log_changed = log_due and changed("log", views.log_identity(run))
            if log_changed:
                viewed["log_at"] = time.time()
            updates.append(views.log_html(views.log_text(run)) if log_changed else gr.skip())
        updates.append(plot_data(diagnostics_figure(curves, x=chart.x)) if charts_changed else gr.skip())

        # Each changed file handed to a download button is copied into Gradio's cache: while the
        # run trains, refresh them at most every FILES_SECONDS; at the end, at once.
        files_due = not run.is_active or time.time() - viewed.get("files_at", 0.0) >= FILES_SECONDS
        if not files_due:
            return updates + [gr.skip()] * len(DOWNLOAD_KINDS), viewed
        viewed["files_at"] = time.time()
        files = self._run_files(run, write_csv=changed("csv", (run.run_id, run.update_count, run.is_active)))
        for kind in DOWNLOAD_KINDS:
            path = files[kind]
            key = (path, _file_identity(path))
            if changed(f"file-{kind}", key):
                updates.append(gr.DownloadButton(value=path, interactive=path is not None))
            else:
                updates.append(gr.skip())
        return updates, viewed

    def _run_view_size(self, with_log: bool) -> int:
        """How many outputs render_run returns (status, charts, GIF and caption, log, files): counted
        from an empty render, so it follows the run view's parts."""
        return len(self.render_run(None, [], {}, with_log=with_log)[0])


# ----------------------------------------------------------------------------- components


@dataclass
class RunView:
    """The components that show one run (and, in the Runs tab, others overlaid on its charts)."""

    status: gr.HTML
    reward_plot: gr.Plot
    diagnostics_plot: gr.Plot
    gif: gr.Image
    gif_caption: gr.HTML  # under the GIF, not on it (the games draw their score at the top)
    log: gr.HTML | None
    downloads: list[gr.DownloadButton]
    chart_controls: list  # metric, smoothing, log scale, x-axis: ChartOptions.from_controls(*values)

    @property
    def outputs(self) -> list:
        shown = [self.status, self.reward_plot, self.gif, self.gif_caption]
        shown += [self.log] if self.log is not None else []
        return shown + [self.diagnostics_plot, *self.downloads]


def build_run_view(prefix: str, with_log: bool, status: gr.HTML | None = None) -> RunView:
    """The run's components; `status` when the page placed the status line elsewhere already."""
    status = status or build_status(prefix)
    chart_controls = build_chart_controls(prefix)
    reward_plot = gr.Plot(plot_data(reward_figure([])), show_label=False, elem_id=f"{prefix}reward-plot")
    with gr.Row(equal_height=False):
        with gr.Column():
            gif = gr.Image(
                label="Rollout",
                show_label=False,
                type="filepath",
                interactive=False,
                height=330,
                elem_id=f"{prefix}rollout-gif",
                buttons=["download"],
            )
            gif_caption = gr.HTML(rollout_caption_html(None, None), elem_id=f"{prefix}rollout-caption")
        log = None
        if with_log:
            log = gr.HTML(views.log_html(""), label="Training log", elem_id=f"{prefix}train-log")
    diagnostics_plot = gr.Plot(plot_data(diagnostics_figure([])), show_label=False, elem_id=f"{prefix}diagnostics-plot")
    with gr.Row():
        downloads = [
            gr.DownloadButton(
                "Final model (.pth)", interactive=False, variant="primary", elem_id=f"{prefix}download-model"
            ),
            gr.DownloadButton("Latest checkpoint", interactive=False, elem_id=f"{prefix}download-checkpoint"),
            gr.DownloadButton(CONFIG_FILE, interactive=False, elem_id=f"{prefix}download-config"),
            gr.DownloadButton(METRICS_CSV_FILE, interactive=False, elem_id=f"{prefix}download-metrics"),
        ]
    return RunView(status, reward_plot, diagnostics_plot, gif, gif_caption, log, downloads, chart_controls)


def build_chart_controls(prefix: str) -> list:
    """The main chart's options, as in TensorBoard / W&B: what to plot, EMA smoothing, log
    scale, steps or training time on the x-axis."""
    default = ChartOptions()
    with gr.Row(equal_height=True, elem_classes=["chart-controls"]):
        metric = gr.Radio(
            [("game score", "score"), ("return", "return"), ("length", "length")],
            value=default.metric,
            label="chart",
            scale=3,
            min_width=330,
            elem_id=f"{prefix}chart-metric",
        )
        smoothing = gr.Slider(
            0.0,
            MAX_SMOOTHING,
            value=default.smoothing,
            step=0.01,
            label="smoothing (EMA)",
            scale=2,
            min_width=160,
            elem_id=f"{prefix}chart-smoothing",
        )
        log_scale = gr.Checkbox(default.log, label="log scale", scale=1, min_width=100, elem_id=f"{prefix}chart-log")
        x_axis = gr.Radio(
            [("steps", "steps"), ("training time", "time")],
            value=default.x,
            label="x-axis",
            scale=2,
            min_width=200,
            elem_id=f"{prefix}chart-x",
        )
    return [metric, smoothing, log_scale, x_axis]


def on_chart_change(controls: list, handler, inputs: list, viewed: gr.State, outputs: list, **options) -> None:
    """Redraw with `handler` at once when the user changes a chart control (a slider on release):
    the session's `viewed` state forgets when the charts were last drawn, so the redraw is not
    held back to the charts' pace while a run trains."""
    position = inputs.index(viewed)

    def redraw_now(*values):
        values = list(values)
        values[position] = charts_due_now(values[position])
        return handler(*values)

    for control in controls:
        trigger = control.release if isinstance(control, gr.Slider) else control.input
        trigger(redraw_now, inputs, outputs, show_progress="hidden", **options)


def build_status(prefix: str) -> gr.HTML:
    """The run's status line: its name, badge, score, progress and error."""
    return gr.HTML(views.status_html(None), elem_id=f"{prefix}status")


def plot_data(figure: dict) -> PlotData:
    """A plotly-JSON figure dict, ready for gr.Plot without building a plotly Figure."""
    return PlotData(type="plotly", plot=json.dumps(figure))


def charts_due_now(viewed: dict | None) -> dict:
    """A copy of a session's `viewed` whose next render draws the charts whatever their pace (the
    user changed what they show)."""
    return {**(viewed or {}), "charts_at": 0.0}


def _file_identity(path: str | None) -> tuple | None:
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def rollout_caption_html(gif: GifInfo | None, run: RunSnapshot | None, now: float | None = None) -> str:
    """The line under the rollout GIF: what it shows (studio/views.py `gif_caption`) and, while the
    run trains, how long ago it was recorded: "Rollout at step 12,288, recorded 4 s ago: ..."."""
    text = views.gif_caption(gif, run.config.get("env_name") if run is not None else None)
    if gif is not None and gif.recorded_at is not None and run is not None and run.is_active:
        age = max(0.0, (time.time() if now is None else now) - gif.recorded_at)
        head, colon, tail = text.partition(":")
        text = f"{head}, recorded {age_text(age)} ago{colon}{tail}"
    return f'<div class="gif-caption">{html.escape(text)}</div>'


def age_text(seconds: float) -> str:
    """4 -> "4 s", 200 -> "3 min"."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds // 60:.0f} min"


# One update's metrics, made up (every column of metrics.csv at 1.0): what a run's first chart draws.
_WARM_UP_METRICS = dict.fromkeys(csv_columns(), 1.0)


def warm_in_background() -> threading.Thread:
    """What a run's first tick needs, done once in a background thread after the page answers:
    each kind of chart drawn with made-up points (their first drawing imports plotly's templates
    and subplots, seconds on a small machine), then the games' classes for their score units
    (`game_score`: torch, seconds more). Without it the first run's first tick waits for both, and
    with it the first picture on the page (measured: 7 s later)."""

    def draw() -> None:
        curves = [CurveSource("warm-up", [{**_WARM_UP_METRICS, "step": step} for step in (1, 2)], "flappy_bird")]
        reward_figure(curves)
        diagnostics_figure(curves)
        game_score("cartpole")

    thread = threading.Thread(target=draw, name="warm-up", daemon=True)
    thread.start()
    return thread
