"""The Train tab: Start and Stop, the form (studio/train_form.py) and the live view of the run this
browser tab shows (status, charts, GIF, log, files, machine load, cluster nodes), polled by a timer
while the run trains. A new tab shows the newest running run, and the form holds its settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from studio.charts import ChartOptions
from studio.cluster_view import run_nodes_html
from studio.form import FORM_FIELDS, validated_config
from studio.handlers import PRIVATE, USER_ERRORS, bold_message, changed_value
from studio.run_view import RunView, RunViewHandlers, build_run_view, build_status, on_chart_change, plot_data
from studio.runs import RunSnapshot
from studio.system_chart import system_figure
from studio.train_form import FormHandlers, FormPanel, build_form, wire_form


class TrainTab(FormHandlers, RunViewHandlers):
    """The Train tab's event functions: the form's, starting and stopping, the live view."""

    def on_tick(self, run_id: str, viewed: dict, *chart_controls):
        """Timer tick of the live view: the run's state, charts, GIF, log, files, machine load, nodes.
        Also what a change of the chart's controls calls: a changed option redraws the charts."""
        run = self._snapshot(run_id)
        updates, viewed = self.render_run(
            run, [], viewed, with_log=True, chart=ChartOptions.from_controls(*chart_controls)
        )
        active = run is not None and run.is_active
        can_stop = active and run.status != "stopping"
        stop_button = gr.Button(interactive=can_stop) if changed_value(viewed, "can_stop", can_stop) else gr.skip()
        samples = self.monitor.sample()  # a new reading at most every few seconds, shared by all tabs
        # A tick that carries a new picture leaves the charts, this one too, to the next (render_run)
        new_sample = (
            bool(samples) and not viewed.get("picture_only") and changed_value(viewed, "usage_at", samples[-1].time)
        )
        usage = plot_data(system_figure(samples)) if new_sample else gr.skip()
        timer = gr.skip() if active else gr.Timer(active=False)
        return (*updates, usage, stop_button, self.nodes_update(run, viewed), timer, viewed)

    def nodes_update(self, run: RunSnapshot | None, viewed: dict):
        """The cluster panel (world size, one row per node) of a run launched through the elastic
        launcher, hidden for other runs; with the worker command for the session that started it."""
        join = viewed.get("worker_join") or {}
        panel = run_nodes_html(run.run_dir, join.get(run.run_id)) if run is not None else ""
        if not changed_value(viewed, "nodes", panel):
            return gr.skip()
        return gr.HTML(panel, visible=bool(panel))

    def on_start(self, *values):
        """Validate the form and start a run. Returns message, run id, timer, viewed."""
        try:
            state = self.start_run(validated_config(values, self.allow_custom_envs))
        except USER_ERRORS as error:
            gr.Warning(str(error).splitlines()[0])
            return bold_message(error), gr.skip(), gr.skip(), gr.skip()
        return (
            f"Started **{state.run_id}**.{self.join_note(state.run_id)}",
            state.run_id,
            gr.Timer(active=True),
            self.join_state(state.run_id),
        )

    def on_follow_run(self, picked: str | None, shown: str | None):
        """After Open / Resume on the Runs tab: the form takes the run the Train tab now shows,
        and is left alone when the button did not switch to the picked run (e.g. no run picked)."""
        if not picked or picked != shown:
            return [gr.skip()] * (len(FORM_FIELDS) + 1)
        return self.on_load_run_settings(shown)

    def on_load(self):
        """A new tab shows the newest running run (else the newest run), e.g. after a reopen, and
        the form holds that run's settings, so the two never disagree."""
        runs = self.manager.list_runs()
        active = [run for run in runs if run.is_active]
        shown = active[0] if active else (runs[0] if runs else None)
        if shown is None:
            return [gr.skip(), gr.skip(), *[gr.skip()] * len(FORM_FIELDS), gr.skip()]
        return [shown.run_id, gr.Timer(active=True), *self.on_load_run_settings(shown.run_id)]


# ----------------------------------------------------------------------------- components


@dataclass
class TrainPanel:
    """The Train tab's components (the Runs tab's Open and Resume switch it to a run)."""

    tab: gr.Tab
    start_button: gr.Button
    stop_button: gr.Button
    message: gr.Markdown
    form: FormPanel
    run_box: gr.Textbox  # which run this browser tab shows
    live: RunView
    cluster_panel: gr.HTML
    system_plot: gr.Plot


def build_train_tab(default_values: dict[str, Any], devices, env_choices) -> TrainPanel:
    """The Train tab's layout: a bar (Start, Stop, message, status line), then form and live view."""
    with gr.Tab("Train", id="train") as tab:
        # Start, Stop and the status line first: on a phone (390 px) they are in the
        # first screen, above the form; on a wide screen they head the two columns.
        with gr.Row(equal_height=False, elem_id="train-bar"):
            with gr.Column(scale=2, min_width=340):
                with gr.Row():
                    start_button = gr.Button("Start", variant="primary", min_width=120, elem_id="start")
                    stop_button = gr.Button("Stop", variant="stop", interactive=False, min_width=120, elem_id="stop")
                message = gr.Markdown(elem_id="train-message")
            with gr.Column(scale=5):
                live_status = build_status("")
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=340):
                form = build_form(default_values, devices, env_choices)
            with gr.Column(scale=5):
                # Which run this tab shows (the status line names it); hidden, but an
                # input of every tick, so each tab can follow a different run.
                run_box = gr.Textbox(visible=False, elem_id="run-id")
                live = build_run_view("", with_log=True, status=live_status)
                cluster_panel = gr.HTML("", visible=False, elem_id="cluster-panel")  # studio/cluster_view.py
                system_plot = gr.Plot(plot_data(system_figure([])), show_label=False, elem_id="system-plot")
    return TrainPanel(tab, start_button, stop_button, message, form, run_box, live, cluster_panel, system_plot)


def wire_train_tab(handlers: TrainTab, panel: TrainPanel, demo: gr.Blocks, timer: gr.Timer, viewed: gr.State) -> None:
    """The Train tab's events: `timer` polls the live view, `viewed` is what this session has drawn."""
    form_inputs = panel.form.inputs
    live_outputs = [*panel.live.outputs, panel.system_plot, panel.stop_button, panel.cluster_panel, timer, viewed]
    live_inputs = [panel.run_box, viewed, *panel.live.chart_controls]
    timer.tick(handlers.on_tick, live_inputs, live_outputs, show_progress="hidden", **PRIVATE)
    on_chart_change(panel.live.chart_controls, handlers.on_tick, live_inputs, viewed, live_outputs, **PRIVATE)
    panel.start_button.click(handlers.on_start, form_inputs, [panel.message, panel.run_box, timer, viewed], **PRIVATE)
    panel.stop_button.click(handlers.on_stop, panel.run_box, panel.message, **PRIVATE)
    demo.load(handlers.on_load, None, [panel.run_box, timer, *form_inputs, panel.message], **PRIVATE)
    wire_form(handlers, panel.form, panel.run_box, panel.message)
