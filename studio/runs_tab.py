"""The Runs tab: every run in the runs folder in a table (filtered by game and status, sorted), one
selected run's view with ticked runs overlaid and their config diff, its name and notes, and
Open, Resume, Stop, Delete. A timer follows the shown runs only while the tab is shown.

The table's filters and sorts are plain functions of `RunSnapshot`s (no gradio) in
studio/runs_table.py; the tab's components are studio/runs_layout.py; the compared runs' diff is
studio/compare.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import gradio as gr

from studio import views
from studio.charts import ChartOptions
from studio.compare import compare_note, config_diff
from studio.evaluate import runs_with_models
from studio.handlers import PRIVATE, USER_ERRORS, bold_message, changed_value
from studio.retention import wire_cleanup_buttons
from studio.run_view import RunViewHandlers, on_chart_change
from studio.runs_layout import RunsPanel
from studio.runs_table import ALL, filter_note, game_filter_choices, run_choices, table_runs
from studio.snapshot import RunSnapshot

TABLE_SECONDS = 10.0  # while the Runs tab follows a training run, refresh its table at most this often


def delete_refusal(run: RunSnapshot) -> str | None:
    """Why Delete may not even ask for a confirmation, or None: a run that still trains (the
    manager would refuse the delete after the click)."""
    if run.is_active:
        label = f"{run.name} ({run.run_id})" if run.name else f"Run {run.run_id}"
        return f"**{label} is {run.status}: stop it first** (the *Stop* button, which saves its model), then delete it."
    return None


class RunsTab(RunViewHandlers):
    """The Runs tab's event functions."""

    def runs_table(self, game: str | None, status: str | None, order: str | None):
        """The table (filtered by game and status, sorted) and the line saying how many it lists."""
        rows, note = self._table_rows(game, status, order)
        return views.runs_table(rows), note

    def _table_rows(
        self, game: str | None, status: str | None, order: str | None, runs: Sequence[RunSnapshot] | None = None
    ) -> tuple[list[list], str]:
        runs = self.manager.list_runs() if runs is None else runs
        shown = table_runs(runs, game, status, order)
        return views.runs_table_rows(shown), filter_note(len(shown), len(runs))

    def on_refresh_runs(
        self,
        selected: str | None,
        compared: list[str] | None,
        game: str | None = None,
        status: str | None = None,
        order: str | None = None,
    ):
        """Every run in the runs folder, read again: runs started since (here, by another studio,
        by the CLI) appear, deleted ones go. Outputs: table, picker, compare, Evaluate's run
        picker, game filter, filter note."""
        runs = self.manager.list_runs()
        ids = [run.run_id for run in runs]
        selected = selected if selected in ids else (ids[0] if ids else None)
        compared = [run_id for run_id in (compared or []) if run_id in ids]
        games = game_filter_choices(runs)
        game = game if game in games else ALL
        rows, note = self._table_rows(game, status, order, runs)
        return (
            views.runs_table(rows),
            gr.Dropdown(choices=run_choices(runs), value=selected),
            gr.CheckboxGroup(choices=run_choices(runs), value=compared),
            gr.Dropdown(choices=runs_with_models(runs)),
            gr.Dropdown(choices=games, value=game),
            note,
        )

    def on_table_select(self, event: gr.SelectData):
        """A click on a table row selects that row's run."""
        row = event.row_value or []
        return row[0] if row else gr.skip()

    def _shown_runs(self, run_id: str | None, compared: list[str] | None) -> list[RunSnapshot]:
        """The selected run first, then the ticked ones (each once): what the charts overlay."""
        shown: list[RunSnapshot] = []
        for candidate in [run_id, *(compared or [])]:
            run = self._snapshot(candidate)
            if run is not None and all(run.run_id != other.run_id for other in shown):
                shown.append(run)
        return shown

    def show_selected(
        self, run_id: str | None, compared: list[str] | None, viewed: dict, tab_shown: bool = True, *chart_controls
    ):
        """The selected run with the ticked runs overlaid (also what a change of the chart's
        controls calls). Outputs: the run view, the Runs tab's timer (on while the tab shows a run
        that trains) and what this session has drawn."""
        updates, viewed, live = self._render_shown(run_id, compared, viewed, chart_controls)
        return (*updates, gr.Timer(active=tab_shown and live), viewed)

    def _render_shown(
        self, run_id: str | None, compared: list[str] | None, viewed: dict, chart_controls: Sequence
    ) -> tuple[list, dict, bool]:
        """render_run's updates for the shown runs, and whether one of them trains."""
        shown = self._shown_runs(run_id, compared)
        updates, viewed = self.render_run(
            shown[0] if shown else None,
            shown[1:],
            viewed,
            with_log=False,
            chart=ChartOptions.from_controls(*chart_controls),
        )
        return updates, viewed, any(run.is_active for run in shown)

    def on_runs_tick(
        self,
        run_id: str | None,
        compared: list[str] | None,
        viewed: dict,
        tab_shown: bool,
        game: str | None,
        status: str | None,
        order: str | None,
        *chart_controls,
    ):
        """Timer tick of the Runs tab: the shown runs' status line, charts and files (unchanged parts
        skipped), and every TABLE_SECONDS the table (its steps and states move too). The timer
        switches itself off once no shown run trains, or when the tab is not shown."""
        if not tab_shown:
            return (
                *[gr.skip()] * self._run_view_size(with_log=False),
                gr.skip(),
                gr.skip(),
                gr.Timer(active=False),
                viewed,
            )
        updates, viewed, live = self._render_shown(run_id, compared, viewed, chart_controls)
        rows = note = gr.skip()
        if time.time() - viewed.get("table_at", 0.0) >= TABLE_SECONDS:
            viewed["table_at"] = time.time()
            table, text = self._table_rows(game, status, order)
            if changed_value(viewed, "table", (table, text)):
                rows, note = views.runs_table(table), text
        return (*updates, rows, note, gr.skip() if live else gr.Timer(active=False), viewed)

    def on_compare_change(self, run_id: str | None, compared: list[str] | None):
        """The note above the config diff (a warning when the games differ) and the diff: only
        the keys in which the shown runs' configs differ."""
        shown = self._shown_runs(run_id, compared)
        headers, rows = config_diff(shown)
        return (
            compare_note(shown, len(rows)),
            gr.Dataframe(value={"headers": headers, "data": rows}, visible=bool(rows)),
        )

    def run_notes_fields(self, run_id: str | None):
        """The name and notes boxes, filled from the selected run's notes.json."""
        run = self._snapshot(run_id)
        if run is None:
            return gr.Textbox(value="", interactive=False), gr.Textbox(value="", interactive=False)
        return gr.Textbox(value=run.name, interactive=True), gr.Textbox(value=run.notes, interactive=True)

    def on_save_notes(self, run_id: str | None, name: str | None, notes: str | None):
        """Save the selected run's name and notes (notes.json); the message says what was saved."""
        try:
            run = self.manager.annotate(run_id or "", name, notes)
        except USER_ERRORS as error:
            return bold_message(error)
        if not run.name and not run.notes:
            return f"Cleared the name and notes of **{run.run_id}**."
        return f"Saved the name and notes of **{run.run_id}**" + (f" (now *{run.name}*)." if run.name else ".")

    def on_resume(self, run_id: str):
        """Resume the selected run from its newest checkpoint; the Train tab then shows it."""
        try:
            state = self.manager.resume(run_id)
        except USER_ERRORS as error:
            return bold_message(error), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return (
            f"Resumed **{state.run_id}** from its last checkpoint.{self.join_note(state.run_id)}",
            state.run_id,
            gr.Timer(active=True),
            self.join_state(state.run_id),
            gr.Tabs(selected="train"),
        )

    def on_open(self, run_id: str):
        """Show the selected run in the Train tab's live view."""
        if not self._snapshot(run_id):
            return "**Pick a run first.**", gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return "", run_id, gr.Timer(active=True), {}, gr.Tabs(selected="train")

    def on_stop_selected(self, run_id: str):
        """Stop the selected run, as the Train tab's Stop does."""
        return self.on_stop(run_id)

    def on_delete_request(self, run_id: str):
        """First click of Delete: a confirmation, unless the run still trains (the delete would be
        refused after the confirmation): then the message says to stop it first."""
        run = self._snapshot(run_id)
        if run is None:
            return "**Pick a run first.**", gr.Button(visible=False)
        refusal = delete_refusal(run)
        if refusal:
            return refusal, gr.Button(visible=False)
        return (
            f"Delete **{run.title}** and all its files? Click *Confirm delete*.",
            gr.Button(f"Confirm delete {run_id}", visible=True),
        )

    def on_delete_confirm(self, run_id: str):
        """Second click of Delete: the run's folder goes (refused while it trains)."""
        try:
            self.manager.delete(run_id)
        except USER_ERRORS as error:
            return bold_message(error), gr.Button(visible=False)
        return f"Deleted **{run_id}**.", gr.Button(visible=False)


@dataclass
class RunsEvents:
    """Events of the Runs tab that other tabs chain (each a dict of fn, inputs, outputs)."""

    hide: dict  # another tab is shown: the Runs tab's timer stops
    refresh: dict  # the runs folder read again (also Evaluate's run picker)
    last_viewed: gr.State  # the run this tab last looked at: the Train tab's, or one picked here


def wire_runs_tab(
    handlers: RunsTab,
    panel: RunsPanel,
    poll_seconds: float,
    switch_to_run: list,
    follow_run: dict,
    eval_run: gr.Dropdown,
    session_seconds: float,
) -> RunsEvents:
    """The Runs tab's events. Open and Resume write `switch_to_run` (the Train tab's run box,
    timer, viewed state, and the Tabs) and then `follow_run` (the form takes that run's
    settings); a refresh also updates `eval_run`, the Evaluate tab's run picker."""
    p = panel
    viewed = gr.State({}, time_to_live=session_seconds)
    shown = gr.State(False, time_to_live=session_seconds)  # the tab's timer ticks only while it is shown
    timer = gr.Timer(poll_seconds, active=False)  # on while the tab shows a run that trains
    filters = [p.game_filter, p.status_filter, p.sort_order]
    refresh = dict(
        fn=handlers.on_refresh_runs,
        inputs=[p.run_picker, p.compare_box, *filters],
        outputs=[p.table, p.run_picker, p.compare_box, eval_run, p.game_filter, p.filter_note],
    )
    history_inputs = [p.run_picker, p.compare_box, viewed, shown, *p.history.chart_controls]
    show = dict(fn=handlers.show_selected, inputs=history_inputs, outputs=[*p.history.outputs, timer, viewed])
    compare = dict(
        fn=handlers.on_compare_change, inputs=[p.run_picker, p.compare_box], outputs=[p.compare_note, p.config_diff]
    )
    hide = dict(fn=lambda: (False, gr.Timer(active=False)), inputs=None, outputs=[shown, timer])
    p.tab.select(lambda: True, None, shown, **PRIVATE).then(**refresh, **PRIVATE).then(**show, **PRIVATE)
    p.refresh_button.click(**refresh, **PRIVATE).then(**show, **PRIVATE)
    for control in filters:
        control.input(handlers.runs_table, filters, [p.table, p.filter_note], **PRIVATE)
    # The run last viewed (Evaluate preselects it): the Train tab's run whenever it switches
    # (load, Start, Open, Resume), and a run picked here by hand (a row, the dropdown); not the
    # picker's own fill-in when the tab opens.
    last_viewed = gr.State(None, time_to_live=session_seconds)
    remember = dict(fn=lambda run_id: run_id or gr.skip(), outputs=last_viewed, **PRIVATE)
    switch_to_run[0].change(inputs=switch_to_run[0], **remember)
    p.run_picker.input(inputs=p.run_picker, **remember)
    p.table.select(handlers.on_table_select, None, p.run_picker, **PRIVATE).then(inputs=p.run_picker, **remember)
    for trigger in (p.run_picker.change, p.compare_box.change):
        trigger(**show, **PRIVATE)
        trigger(**compare, **PRIVATE)
    on_chart_change(
        p.history.chart_controls, handlers.show_selected, history_inputs, viewed, show["outputs"], **PRIVATE
    )
    p.run_picker.change(handlers.run_notes_fields, p.run_picker, [p.name_box, p.notes_box], **PRIVATE)
    timer.tick(
        handlers.on_runs_tick,
        [*history_inputs[:4], *filters, *p.history.chart_controls],
        [*p.history.outputs, p.table, p.filter_note, timer, viewed],
        show_progress="hidden",
        **PRIVATE,
    )
    p.save_notes_button.click(
        handlers.on_save_notes, [p.run_picker, p.name_box, p.notes_box], p.message, **PRIVATE
    ).then(**refresh, **PRIVATE).then(**show, **PRIVATE).then(**compare, **PRIVATE)
    p.open_button.click(handlers.on_open, p.run_picker, [p.message, *switch_to_run], **PRIVATE).then(
        **hide, **PRIVATE
    ).then(**follow_run, **PRIVATE)
    p.resume_button.click(handlers.on_resume, p.run_picker, [p.message, *switch_to_run], **PRIVATE).then(
        **hide, **PRIVATE
    ).then(**follow_run, **PRIVATE)
    p.stop_button.click(handlers.on_stop_selected, p.run_picker, p.message, **PRIVATE)
    p.delete_button.click(handlers.on_delete_request, p.run_picker, [p.message, p.confirm_delete_button], **PRIVATE)
    p.confirm_delete_button.click(
        handlers.on_delete_confirm, p.run_picker, [p.message, p.confirm_delete_button], **PRIVATE
    ).then(**refresh, **PRIVATE)
    wire_cleanup_buttons(
        p.cleanup_buttons,
        handlers.manager,
        p.run_picker,
        p.message,
        handlers.on_refresh_runs,
        refresh["inputs"],
        refresh["outputs"],
        **PRIVATE,
    )
    return RunsEvents(hide=hide, refresh=refresh, last_viewed=last_viewed)
