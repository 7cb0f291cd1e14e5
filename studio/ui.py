"""The page: Train (form and live view), Runs (history, compare, resume, delete), Evaluate.

All shared state lives in the `RunManager`; each browser session keeps only which run it shows
and what it has already drawn (a `gr.State`), so unchanged charts and files are skipped
(`gr.skip()`) instead of being redrawn or copied into Gradio's cache again.

Stable API endpoints for `gradio_client` (documented in docs/readme/studio.md):
  /start(env_name, settings) -> run summary     /poll(run_id) -> run summary
  /stop(run_id) -> run summary                   /download(run_id, kind) -> file
  /runs() -> one row per run
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import gradio as gr

from studio import views
from studio.callbacks import DEFAULT_ENV, DOWNLOAD_KINDS, Studio, charts_due_now, merged_settings, plot_data
from studio.charts import MAX_SMOOTHING, ChartOptions, diagnostics_figure, reward_figure, system_figure
from studio.form import BASIC_FIELDS, FORM_FIELDS, FormField, advanced_groups, form_values, tuned_config
from studio.retention import build_cleanup_buttons, wire_cleanup_buttons
from studio.runs import RunManager
from studio.runs_tab import ALL, DEFAULT_SORT, SORT_ORDERS, STATUS_FILTERS
from studio.scratch import ScratchFolder
from studio.system import SystemMonitor, available_devices
from studio.uploads import DEFAULT_MAX_UPLOAD, keep_uploads_in
from trainer.cluster.nodes import DEFAULT_PORT

__all__ = ["DOWNLOAD_KINDS", "Studio", "build_app", "launch", "launch_options", "merged_settings"]

SESSION_CAPACITY = 200        # browser sessions whose state Gradio keeps (Gradio's default: 10,000)
SESSION_SECONDS = 6 * 3600    # a tab's state is dropped this long after its last update

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
/* A phone (390 px): the 2 x 4 diagnostics grid keeps a width where its titles fit, and scrolls
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


# ----------------------------------------------------------------------------- components


@dataclass
class RunView:
    """The components that show one run (and, in the Runs tab, others overlaid on its charts)."""

    status: gr.HTML
    reward_plot: gr.Plot
    diagnostics_plot: gr.Plot
    gif: gr.Image
    gif_caption: gr.HTML       # under the GIF, not on it (the games draw their score at the top)
    log: gr.HTML | None
    downloads: list[gr.DownloadButton]
    chart_controls: list  # metric, smoothing, log scale, x-axis: ChartOptions.from_controls(*values)

    @property
    def outputs(self) -> list:
        shown = [self.status, self.reward_plot, self.gif, self.gif_caption]
        shown += [self.log] if self.log is not None else []
        return shown + [self.diagnostics_plot, *self.downloads]


def _build_run_view(prefix: str, with_log: bool, status: gr.HTML | None = None) -> RunView:
    """The run's components; `status` when the page placed the status line elsewhere already."""
    status = status or _build_status(prefix)
    chart_controls = _build_chart_controls(prefix)
    reward_plot = gr.Plot(plot_data(reward_figure([])), show_label=False, elem_id=f"{prefix}reward-plot")
    with gr.Row(equal_height=False):
        with gr.Column():
            gif = gr.Image(
                label="Rollout", show_label=False, type="filepath", interactive=False, height=330,
                elem_id=f"{prefix}rollout-gif", buttons=["download"],
            )
            gif_caption = gr.HTML(views.gif_caption_html(None), elem_id=f"{prefix}rollout-caption")
        log = None
        if with_log:
            log = gr.HTML(views.log_html(""), label="Training log", elem_id=f"{prefix}train-log")
    diagnostics_plot = gr.Plot(plot_data(diagnostics_figure([])), show_label=False, elem_id=f"{prefix}diagnostics-plot")
    with gr.Row():
        downloads = [
            gr.DownloadButton("Final model (.pth)", interactive=False, variant="primary", elem_id=f"{prefix}download-model"),
            gr.DownloadButton("Latest checkpoint", interactive=False, elem_id=f"{prefix}download-checkpoint"),
            gr.DownloadButton("config.yaml", interactive=False, elem_id=f"{prefix}download-config"),
            gr.DownloadButton("metrics.csv", interactive=False, elem_id=f"{prefix}download-metrics"),
        ]
    return RunView(status, reward_plot, diagnostics_plot, gif, gif_caption, log, downloads, chart_controls)


def _build_chart_controls(prefix: str) -> list:
    """The main chart's options, as in TensorBoard / W&B: what to plot, EMA smoothing, log
    scale, steps or training time on the x-axis."""
    default = ChartOptions()
    with gr.Row(equal_height=True, elem_classes=["chart-controls"]):
        metric = gr.Radio([("game score", "score"), ("return", "return"), ("length", "length")],
                          value=default.metric, label="chart", scale=3, min_width=330, elem_id=f"{prefix}chart-metric")
        smoothing = gr.Slider(0.0, MAX_SMOOTHING, value=default.smoothing, step=0.01, label="smoothing (EMA)",
                              scale=2, min_width=160, elem_id=f"{prefix}chart-smoothing")
        log_scale = gr.Checkbox(default.log, label="log scale", scale=1, min_width=100, elem_id=f"{prefix}chart-log")
        x_axis = gr.Radio([("steps", "steps"), ("training time", "time")], value=default.x, label="x-axis",
                          scale=2, min_width=200, elem_id=f"{prefix}chart-x")
    return [metric, smoothing, log_scale, x_axis]


def _on_chart_change(controls: list, handler, inputs: list, viewed: gr.State, outputs: list, **options) -> None:
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


def _build_status(prefix: str) -> gr.HTML:
    return gr.HTML(views.status_html(None), elem_id=f"{prefix}status")


def _form_component(form_field: FormField, value: Any, devices: Sequence[str], env_choices: Sequence[str]):
    label, info = form_field.key, form_field.help
    elem_id = "field-" + form_field.key.replace(".", "-").replace("_", "-")
    small = {} if form_field.basic else {"min_width": 100}
    if form_field.key == "env_name":
        return gr.Dropdown(
            env_choices, value=value, label="environment (env_name)", allow_custom_value=True,
            info="A built-in game, or type any Gymnasium id (e.g. Acrobot-v1)", elem_id=elem_id,
        )
    if form_field.key == "device":
        return gr.Dropdown(list(devices), value=value, label=label, allow_custom_value=True,
                           info="auto: the GPU when there is one, else the CPU", elem_id=elem_id)
    if form_field.key == "nproc_per_node":
        label = "processes (nproc_per_node)"
    if form_field.key == "model_type":
        return gr.Dropdown(list(form_field.choices), value=value, label="model (model_type)",
                           info="Policy network size; ppo-cnn for image observations", elem_id=elem_id)
    if form_field.kind == "bool":
        return gr.Checkbox(value=bool(value), label=label, info=info, elem_id=elem_id, **small)
    if form_field.kind == "choice":
        return gr.Dropdown(list(form_field.choices), value=value, label=label, info=info, elem_id=elem_id, **small)
    if form_field.kind == "int":
        return gr.Number(value=value, label=label, info=info, precision=0, elem_id=elem_id, **small)
    if form_field.kind == "float":
        return gr.Number(value=value, label=label, info=info, elem_id=elem_id, **small)
    return gr.Textbox(value=value, label=label, info=info, elem_id=elem_id, placeholder="YAML, e.g. {key: value}",
                      **small)


# ----------------------------------------------------------------------------- the page


def build_app(manager: RunManager, allow_custom_envs: bool = False, poll_seconds: float = 1.0,
              monitor: SystemMonitor | None = None, scratch: ScratchFolder | None = None) -> gr.Blocks:
    studio = Studio(manager, allow_custom_envs, monitor, poll_seconds, scratch=scratch)
    defaults = tuned_config(DEFAULT_ENV)
    default_values = dict(zip((f.key for f in FORM_FIELDS), form_values(defaults)))
    devices = available_devices()
    from envs import builtin_env_names

    env_choices = builtin_env_names()
    private = dict(api_visibility="private")

    with gr.Blocks(title="RL Studio", delete_cache=(600, 3600)) as demo:
        live_viewed = gr.State({}, time_to_live=SESSION_SECONDS)
        runs_viewed = gr.State({}, time_to_live=SESSION_SECONDS)
        runs_tab_shown = gr.State(False, time_to_live=SESSION_SECONDS)  # the Runs tab's timer ticks only then
        gr.Markdown(
            "# RL Studio\nTrain a game-playing agent with PPO: pick a game and a model, press "
            "**Start**, watch it learn, download the trained model.",
            elem_id="studio-title",
        )
        with gr.Tabs(selected="train") as tabs:
            # ------------------------------------------------------------------ Train
            with gr.Tab("Train", id="train"):
                # Start, Stop and the status line first: on a phone (390 px) they are in the
                # first screen, above the form; on a wide screen they head the two columns.
                with gr.Row(equal_height=False, elem_id="train-bar"):
                    with gr.Column(scale=2, min_width=340):
                        with gr.Row():
                            start_button = gr.Button("Start", variant="primary", min_width=120, elem_id="start")
                            stop_button = gr.Button("Stop", variant="stop", interactive=False, min_width=120, elem_id="stop")
                        train_message = gr.Markdown(elem_id="train-message")
                    with gr.Column(scale=5):
                        live_status = _build_status("")
                with gr.Row(equal_height=False):
                    with gr.Column(scale=2, min_width=340):
                        controls: dict[str, Any] = {}
                        for form_field in BASIC_FIELDS:
                            controls[form_field.key] = _form_component(
                                form_field, default_values[form_field.key], devices, env_choices)
                        batch_info = gr.Markdown(views.batch_note(
                            default_values["num_envs"], default_values["num_steps"],
                            default_values["mini_batch_size"], default_values["total_timesteps"]),
                            elem_id="batch-note")
                        load_run_button = gr.Button("Load the shown run's settings", size="sm",
                                                    elem_id="load-run-settings")
                        with gr.Accordion("Advanced", open=False, elem_id="advanced"):
                            for title, group in advanced_groups():
                                gr.Markdown(f"**{title}**", elem_classes=["field-group-title"])
                                for pair in (group[i:i + 2] for i in range(0, len(group), 2)):
                                    with gr.Row():
                                        for form_field in pair:
                                            controls[form_field.key] = _form_component(
                                                form_field, default_values[form_field.key], devices,
                                                env_choices)
                        with gr.Accordion("YAML config", open=False, elem_id="yaml-section"):
                            yaml_box = gr.Code(language="yaml", lines=12, label="Paste a config, or export the form",
                                               elem_id="yaml-box")
                            with gr.Row():
                                load_yaml_button = gr.Button("Load into form", size="sm", elem_id="load-yaml")
                                upload_yaml_button = gr.UploadButton(
                                    "Upload .yaml", file_types=[".yaml", ".yml"], size="sm", elem_id="upload-yaml")
                                export_yaml_button = gr.Button("Export form", size="sm", elem_id="export-yaml")
                            export_file = gr.File(label="Exported config", visible=False, interactive=False)
                    with gr.Column(scale=5):
                        # Which run this tab shows (the status line names it); hidden, but an
                        # input of every tick, so each tab can follow a different run.
                        run_box = gr.Textbox(visible=False, elem_id="run-id")
                        live = _build_run_view("", with_log=True, status=live_status)
                        cluster_panel = gr.HTML("", visible=False, elem_id="cluster-panel")  # studio/cluster_view.py
                        system_plot = gr.Plot(plot_data(system_figure([])), show_label=False, elem_id="system-plot")
            # ------------------------------------------------------------------ Runs
            with gr.Tab("Runs", id="runs") as runs_tab:
                gr.Markdown("Every run in the runs folder (this studio's, an earlier one's, the CLI's). Click a "
                            "row to select it; tick runs to compare their curves and configs.")
                with gr.Row(equal_height=False):
                    refresh_button = gr.Button("Refresh", size="sm", scale=0, min_width=100, elem_id="refresh-runs")
                    game_filter = gr.Dropdown([ALL], value=ALL, label="game", scale=1, min_width=140,
                                              elem_id="runs-game-filter")
                    status_filter = gr.Dropdown(list(STATUS_FILTERS), value=ALL, label="status", scale=1,
                                                min_width=140, elem_id="runs-status-filter")
                    sort_order = gr.Dropdown(list(SORT_ORDERS), value=DEFAULT_SORT, label="sort", scale=1,
                                             min_width=140, elem_id="runs-sort")
                    filter_note = gr.Markdown(elem_id="runs-filter-note")
                runs_table = gr.Dataframe(headers=views.RUNS_TABLE_HEADERS, interactive=False, wrap=True,
                                          max_height=360, elem_id="runs-table")
                with gr.Row(equal_height=False):
                    run_picker = gr.Dropdown([], label="Selected run", scale=3, elem_id="run-picker")
                    open_button = gr.Button("Open in live view", scale=1)
                    resume_button = gr.Button("Resume", scale=1, elem_id="resume")
                    stop_selected_button = gr.Button("Stop", variant="stop", scale=1)
                    delete_button = gr.Button("Delete", scale=1, elem_id="delete")
                    confirm_delete_button = gr.Button("Confirm delete", variant="stop", visible=False,
                                                      scale=1, elem_id="confirm-delete")
                    cleanup_buttons = build_cleanup_buttons()
                runs_message = gr.Markdown(elem_id="runs-message")
                with gr.Row(equal_height=False):
                    name_box = gr.Textbox(label="Name", placeholder="e.g. lr 1e-3, bigger net", interactive=False,
                                          max_lines=1, scale=2, elem_id="run-name")
                    notes_box = gr.Textbox(label="Notes", placeholder="What you tried, what you saw", lines=2,
                                           max_lines=8, interactive=False, scale=4, elem_id="run-notes")
                    save_notes_button = gr.Button("Save name and notes", scale=1, elem_id="save-notes")
                compare_box = gr.CheckboxGroup([], label="Compare (overlay curves)", elem_id="compare")
                compare_note = gr.Markdown(elem_id="compare-note")
                config_diff = gr.Dataframe(interactive=False, wrap=True, max_height=300, visible=False,
                                           label="Config keys that differ", elem_id="config-diff")
                history = _build_run_view("runs-", with_log=False)
            # ------------------------------------------------------------------ Evaluate
            with gr.Tab("Evaluate", id="evaluate") as evaluate_tab:
                with gr.Row(equal_height=False):
                    with gr.Column(scale=1, min_width=330):
                        eval_source = gr.Radio([("A run's model", "run"), ("Upload a .pth", "upload")],
                                               value="run", label="Model", elem_id="eval-source")
                        eval_run = gr.Dropdown([], label="Run", elem_id="eval-run")
                        eval_file = gr.Dropdown([], label="Model file", elem_id="eval-file")
                        eval_upload = gr.File(label="Upload a .pth (loaded weights-only: nothing in it runs)",
                                              file_types=[".pth", ".pt"], elem_id="eval-upload")
                        eval_episodes = gr.Number(10, label="episodes", precision=0, elem_id="eval-episodes")
                        eval_deterministic = gr.Checkbox(True, label="deterministic (always the most likely action)")
                        eval_button = gr.Button("Evaluate", variant="primary", elem_id="evaluate")
                    with gr.Column(scale=2):
                        eval_message = gr.Markdown(elem_id="eval-message")
                        eval_gif = gr.Image(label="The agent playing", show_label=False, type="filepath",
                                            interactive=False, height=380, elem_id="eval-gif")
            with gr.Tab("Watch", id="watch") as watch_tab:  # studio/watch.py: live play, ONNX, policy server
                from studio.watch import build_watch_tab

                build_watch_tab(manager, allow_custom_envs, studio.scratch, watch_tab)

        timer = gr.Timer(poll_seconds, active=False)
        runs_timer = gr.Timer(poll_seconds, active=False)  # on while the Runs tab shows a run that trains
        form_inputs = [controls[form_field.key] for form_field in FORM_FIELDS]

        # ---- live view
        live_outputs = [*live.outputs, system_plot, stop_button, cluster_panel, timer, live_viewed]
        live_inputs = [run_box, live_viewed, *live.chart_controls]
        timer.tick(studio.on_tick, live_inputs, live_outputs, show_progress="hidden", **private)
        _on_chart_change(live.chart_controls, studio.on_tick, live_inputs, live_viewed, live_outputs, **private)
        start_button.click(studio.on_start, form_inputs, [train_message, run_box, timer, live_viewed],
                           **private)
        stop_button.click(studio.on_stop, run_box, train_message, **private)
        demo.load(studio.on_load, None, [run_box, timer, *form_inputs, train_message], **private)

        # ---- form
        controls["env_name"].input(studio.on_env_change, controls["env_name"], [*form_inputs, train_message],
                                   **private)
        batch_keys = ("num_envs", "num_steps", "mini_batch_size", "total_timesteps")
        for key in batch_keys:
            controls[key].change(views.batch_note, [controls[k] for k in batch_keys], batch_info, **private)
        # A message about the form (an error, "Filled the form ...") goes stale once a field is
        # edited: cleared in the browser, no server round trip.
        for form_field in FORM_FIELDS:
            if form_field.key != "env_name":  # its own handler writes the message
                controls[form_field.key].input(None, None, train_message, js="() => ''", **private)
        load_run_button.click(studio.on_load_run_settings, run_box, [*form_inputs, train_message], **private)
        load_yaml_button.click(studio.on_load_yaml, yaml_box, [*form_inputs, train_message], **private)
        upload_yaml_button.upload(studio.on_upload_yaml, upload_yaml_button,
                                  [yaml_box, *form_inputs, train_message], **private)
        export_yaml_button.click(studio.on_export_yaml, form_inputs, [yaml_box, export_file, train_message],
                                 **private)

        # ---- Runs tab
        refresh_inputs = [run_picker, compare_box, game_filter, status_filter, sort_order]
        refresh_outputs = [runs_table, run_picker, compare_box, eval_run, game_filter, filter_note]
        history_inputs = [run_picker, compare_box, runs_viewed, runs_tab_shown, *history.chart_controls]
        history_outputs = [*history.outputs, runs_timer, runs_viewed]
        runs_hidden = (lambda: (False, gr.Timer(active=False)), None, [runs_tab_shown, runs_timer])
        runs_tab.select(lambda: True, None, runs_tab_shown, **private).then(
            studio.on_refresh_runs, refresh_inputs, refresh_outputs, **private).then(
            studio.show_selected, history_inputs, history_outputs, **private)
        refresh_button.click(studio.on_refresh_runs, refresh_inputs, refresh_outputs, **private).then(
            studio.show_selected, history_inputs, history_outputs, **private)
        evaluate_tab.select(*runs_hidden, **private).then(
            studio.on_refresh_runs, refresh_inputs, refresh_outputs, **private).then(
            studio.on_evaluate_tab, eval_run, eval_run, **private)  # a run and its final model picked
        train_tab = next(tab for tab in tabs.children if getattr(tab, "id", None) == "train")
        for leave in (train_tab.select, watch_tab.select):
            leave(*runs_hidden, **private)
        for control in (game_filter, status_filter, sort_order):
            control.input(studio.runs_table, [game_filter, status_filter, sort_order], [runs_table, filter_note],
                          **private)
        runs_table.select(studio.on_table_select, None, run_picker, **private)
        for trigger in (run_picker.change, compare_box.change):
            trigger(studio.show_selected, history_inputs, history_outputs, **private)
            trigger(studio.on_compare_change, [run_picker, compare_box], [compare_note, config_diff], **private)
        _on_chart_change(history.chart_controls, studio.show_selected, history_inputs, runs_viewed, history_outputs,
                         **private)
        run_picker.change(studio.run_notes_fields, run_picker, [name_box, notes_box], **private)
        runs_timer.tick(studio.on_runs_tick, [run_picker, compare_box, runs_viewed, runs_tab_shown, game_filter,
                                              status_filter, sort_order, *history.chart_controls],
                        [*history.outputs, runs_table, filter_note, runs_timer, runs_viewed],
                        show_progress="hidden", **private)
        save_notes_button.click(studio.on_save_notes, [run_picker, name_box, notes_box], runs_message,
                                **private).then(
            studio.on_refresh_runs, refresh_inputs, refresh_outputs, **private).then(
            studio.show_selected, history_inputs, history_outputs, **private).then(
            studio.on_compare_change, [run_picker, compare_box], [compare_note, config_diff], **private)
        # The Train tab then shows that run: the form follows it (form and live view never disagree).
        follow = dict(fn=studio.on_follow_run, inputs=[run_picker, run_box], outputs=[*form_inputs, train_message],
                      **private)
        open_button.click(studio.on_open, run_picker, [runs_message, run_box, timer, live_viewed, tabs],
                          **private).then(*runs_hidden, **private).then(**follow)
        resume_button.click(studio.on_resume, run_picker, [runs_message, run_box, timer, live_viewed, tabs],
                            **private).then(*runs_hidden, **private).then(**follow)
        stop_selected_button.click(studio.on_stop_selected, run_picker, runs_message, **private)
        delete_button.click(studio.on_delete_request, run_picker, [runs_message, confirm_delete_button], **private)
        confirm_delete_button.click(studio.on_delete_confirm, run_picker, [runs_message, confirm_delete_button],
                                    **private).then(
            studio.on_refresh_runs, refresh_inputs, refresh_outputs, **private)
        wire_cleanup_buttons(cleanup_buttons, studio.manager, run_picker, runs_message, studio.on_refresh_runs,
                             refresh_inputs, refresh_outputs, **private)

        # ---- Evaluate tab
        eval_run.change(studio.model_files, eval_run, eval_file, **private)
        eval_run.input(lambda: "run", None, eval_source, **private)
        eval_upload.upload(lambda: "upload", None, eval_source, **private)
        eval_button.click(studio.on_evaluate,
                          [eval_source, eval_run, eval_file, eval_upload, eval_episodes, eval_deterministic],
                          [eval_message, eval_gif], **private)

        # ---- API for gradio_client
        gr.api(studio.api_start, api_name="start")
        gr.api(studio.api_poll, api_name="poll")
        gr.api(studio.api_stop, api_name="stop")
        gr.api(studio.api_runs, api_name="runs")
        download_run = gr.Textbox(visible=False)
        download_kind = gr.Textbox(visible=False)
        download_file = gr.File(visible=False)
        download_trigger = gr.Button(visible=False)
        download_trigger.click(studio.api_download, [download_run, download_kind], download_file,
                               api_name="download")
    demo.studio = studio  # type: ignore[attr-defined]  (tests reach the RunManager through it)
    return demo


def launch_options(host: str, port: int, auth: tuple[str, str] | None, allowed_paths: list[str],
                   max_upload_size: str | int) -> dict:
    """Blocks.launch keywords: files served only from the runs folder, bounded session state and
    uploads, failed logins (page and /metrics) throttled per client address and user name."""
    from starlette.middleware import Middleware

    from studio.throttle import LoginThrottle
    from studio.uploads import UploadLimit, parse_size

    max_bytes = parse_size(max_upload_size)
    return dict(server_name=host, server_port=port, auth=auth, css=CSS, theme=gr.themes.Soft(),
                allowed_paths=allowed_paths, max_file_size=max_bytes, footer_links=["api"],
                show_error=False, state_session_capacity=SESSION_CAPACITY,
                app_kwargs={"middleware": [Middleware(LoginThrottle), Middleware(UploadLimit, max_bytes=max_bytes)]})


def startup_line(url: str, runs_dir) -> str:
    """The one line the console shows once the studio answers."""
    return f"RL Studio is running on {url} (runs folder: {runs_dir}). Press Ctrl-C to stop it."


def launch(host: str = "127.0.0.1", port: int = 7860, runs_dir: str = "runs",
           auth: tuple[str, str] | None = None, max_concurrent_runs: int = 2,
           allow_custom_envs: bool = False, poll_seconds: float = 1.0, max_upload_size: str | int = DEFAULT_MAX_UPLOAD,
           cluster_host: str = "127.0.0.1", cluster_port: int = DEFAULT_PORT,
           scratch: ScratchFolder | None = None) -> None:
    """Build the studio and serve it until Ctrl-C; running trainers are then stopped (saving models).
    scratch: the studio's scratch folder, when the caller made it (and pointed Gradio's uploads into
    it) before importing gradio, as app.py does."""
    scratch = scratch or ScratchFolder()
    keep_uploads_in(scratch)  # before the page is built: each component reads GRADIO_TEMP_DIR when made
    manager = RunManager(runs_dir, max_concurrent_runs=max_concurrent_runs, allow_custom_envs=allow_custom_envs,
                         cluster_host=cluster_host, cluster_port=cluster_port)
    demo = build_app(manager, allow_custom_envs=allow_custom_envs, poll_seconds=poll_seconds, scratch=scratch)
    demo.queue(default_concurrency_limit=4)
    from studio.score import preload_in_background

    preload_in_background()
    try:
        options = launch_options(host, port, auth, [str(manager.runs_dir)], max_upload_size)
        from studio.metrics import metrics_route  # GET /metrics (Prometheus), same --auth as the page

        options["app_kwargs"]["routes"] = [metrics_route(manager, auth)]
        # quiet: Gradio's own start lines end with "To create a public link, set `share=True`",
        # advice that is wrong here (a share link would expose the studio to the internet).
        demo.launch(quiet=True, prevent_thread_lock=True, **options)
        print(startup_line(demo.local_url, manager.runs_dir), flush=True)
        demo.block_thread()
    finally:
        manager.shutdown()
