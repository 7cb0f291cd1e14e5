"""The Runs tab: every run in the runs folder in a table (filtered by game and status, sorted), one
selected run's view with ticked runs overlaid and their config diff, its name and notes, and
Open, Resume, Stop, Delete. A timer follows the shown runs only while the tab is shown.

The table's filters and sorts are plain functions of `RunSnapshot`s (no gradio), tested
directly; the compared runs' diff is studio/compare.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from studio import views
from studio.charts import ChartOptions
from studio.compare import compare_note, config_diff
from studio.evaluate import runs_with_models
from studio.handlers import PRIVATE, USER_ERRORS, bold_message, changed_value
from studio.retention import build_cleanup_buttons, wire_cleanup_buttons
from studio.run_view import RunView, RunViewHandlers, build_run_view, on_chart_change
from studio.snapshot import ACTIVE_STATUSES, RunSnapshot

TABLE_SECONDS = 10.0  # while the Runs tab follows a training run, refresh its table at most this often
ALL = "all"
ACTIVE = "active"  # the status filter's "starting, running or stopping"
STATUS_FILTERS = (ALL, ACTIVE, "running", "finished", "stopped", "failed", "interrupted")
# The status sort: what needs attention first (training, then broken), finished runs last.
STATUS_ORDER = ("running", "starting", "stopping", "failed", "interrupted", "stopped", "finished")


def _missing_last(value: float | None) -> tuple[bool, float]:
    """Sort key for a number that may be missing: missing ones after every number (descending)."""
    return (value is None or not math.isfinite(value), -(value or 0.0))


# label -> sort key; each key sorts ascending, so "newest first" negates the start time
SORT_ORDERS: dict[str, Callable[[RunSnapshot], Any]] = {
    "newest first": lambda run: (-(run.started_at or 0.0), run.run_id),
    "oldest first": lambda run: (run.started_at or math.inf, run.run_id),
    "best return": lambda run: (_missing_last(run.best_return), run.run_id),
    "last return": lambda run: (_missing_last(run.last_return), run.run_id),
    "most steps": lambda run: (-run.step, run.run_id),
    "name": lambda run: (not run.name, run.title.casefold(), run.run_id),
    "game": lambda run: (run.env_name.casefold(), -(run.started_at or 0.0), run.run_id),
    "status": lambda run: (
        STATUS_ORDER.index(run.status) if run.status in STATUS_ORDER else len(STATUS_ORDER),
        -(run.started_at or 0.0),
        run.run_id,
    ),
}
DEFAULT_SORT = "newest first"


def game_filter_choices(runs: Sequence[RunSnapshot]) -> list[str]:
    """ "all", then every game some run plays, alphabetically."""
    return [ALL] + sorted({run.env_name for run in runs}, key=str.casefold)


def table_runs(
    runs: Sequence[RunSnapshot], game: str | None = ALL, status: str | None = ALL, order: str | None = DEFAULT_SORT
) -> list[RunSnapshot]:
    """The runs the table lists: those of `game` and `status` ("all" for any; status "active" for
    starting, running or stopping), in `order` (a key of SORT_ORDERS)."""
    game, status = game or ALL, status or ALL
    shown = [
        run
        for run in runs
        if (game == ALL or run.env_name == game)
        and (status == ALL or run.status == status or (status == ACTIVE and run.status in ACTIVE_STATUSES))
    ]
    return sorted(shown, key=SORT_ORDERS.get(order or DEFAULT_SORT, SORT_ORDERS[DEFAULT_SORT]))


def filter_note(shown: int, total: int) -> str:
    """Under the filters: how many runs the table lists of how many there are."""
    if total == 0:
        return "No runs yet: start one on the Train tab (or with `python -m trainer`), then Refresh."
    if shown == total:
        return f"{total} run(s)."
    return f"Showing {shown} of {total} runs (the filters hide {total - shown})."


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


def run_choices(runs: Sequence[RunSnapshot]) -> list[tuple[str, str]]:
    """(label, run id) for the run pickers: a named run shows its name beside its id."""
    return [(f"{run.name} ({run.run_id})" if run.name else run.run_id, run.run_id) for run in runs]


# ----------------------------------------------------------------------------- components


@dataclass
class RunsPanel:
    """The Runs tab's components."""

    tab: gr.Tab
    refresh_button: gr.Button
    game_filter: gr.Dropdown
    status_filter: gr.Dropdown
    sort_order: gr.Dropdown
    filter_note: gr.Markdown
    table: gr.Dataframe
    run_picker: gr.Dropdown
    open_button: gr.Button
    resume_button: gr.Button
    stop_button: gr.Button
    delete_button: gr.Button
    confirm_delete_button: gr.Button
    cleanup_buttons: Any  # studio/retention.py: delete old checkpoints
    message: gr.Markdown
    name_box: gr.Textbox
    notes_box: gr.Textbox
    save_notes_button: gr.Button
    compare_box: gr.CheckboxGroup
    compare_note: gr.Markdown
    config_diff: gr.Dataframe
    history: RunView  # the selected run, the ticked ones overlaid


@dataclass
class RunsEvents:
    """Events of the Runs tab that other tabs chain (each a dict of fn, inputs, outputs)."""

    hide: dict  # another tab is shown: the Runs tab's timer stops
    refresh: dict  # the runs folder read again (also Evaluate's run picker)


def build_runs_tab() -> RunsPanel:
    """The Runs tab's layout: filters, table, the selected run's actions, notes, compare, its view."""
    with gr.Tab("Runs", id="runs") as tab:
        gr.Markdown(
            "Every run in the runs folder (this studio's, an earlier one's, the CLI's). Click a "
            "row to select it; tick runs to compare their curves and configs."
        )
        with gr.Row(equal_height=False):
            refresh_button = gr.Button("Refresh", size="sm", scale=0, min_width=100, elem_id="refresh-runs")
            game_filter = gr.Dropdown(
                [ALL], value=ALL, label="game", scale=1, min_width=140, elem_id="runs-game-filter"
            )
            status_filter = gr.Dropdown(
                list(STATUS_FILTERS), value=ALL, label="status", scale=1, min_width=140, elem_id="runs-status-filter"
            )
            sort_order = gr.Dropdown(
                list(SORT_ORDERS), value=DEFAULT_SORT, label="sort", scale=1, min_width=140, elem_id="runs-sort"
            )
            note = gr.Markdown(elem_id="runs-filter-note")
        table = gr.Dataframe(
            headers=views.RUNS_TABLE_HEADERS, interactive=False, wrap=True, max_height=360, elem_id="runs-table"
        )
        with gr.Row(equal_height=False):
            run_picker = gr.Dropdown([], label="Selected run", scale=3, elem_id="run-picker")
            open_button = gr.Button("Open in live view", scale=1)
            resume_button = gr.Button("Resume", scale=1, elem_id="resume")
            stop_button = gr.Button("Stop", variant="stop", scale=1)
            delete_button = gr.Button("Delete", scale=1, elem_id="delete")
            confirm_delete_button = gr.Button(
                "Confirm delete", variant="stop", visible=False, scale=1, elem_id="confirm-delete"
            )
            cleanup_buttons = build_cleanup_buttons()
        message = gr.Markdown(elem_id="runs-message")
        with gr.Row(equal_height=False):
            name_box = gr.Textbox(
                label="Name",
                placeholder="e.g. lr 1e-3, bigger net",
                interactive=False,
                max_lines=1,
                scale=2,
                elem_id="run-name",
            )
            notes_box = gr.Textbox(
                label="Notes",
                placeholder="What you tried, what you saw",
                lines=2,
                max_lines=8,
                interactive=False,
                scale=4,
                elem_id="run-notes",
            )
            save_notes_button = gr.Button("Save name and notes", scale=1, elem_id="save-notes")
        compare_box = gr.CheckboxGroup([], label="Compare (overlay curves)", elem_id="compare")
        diff_note = gr.Markdown(elem_id="compare-note")
        diff = gr.Dataframe(
            interactive=False,
            wrap=True,
            max_height=300,
            visible=False,
            label="Config keys that differ",
            elem_id="config-diff",
        )
        history = build_run_view("runs-", with_log=False)
    return RunsPanel(
        tab,
        refresh_button,
        game_filter,
        status_filter,
        sort_order,
        note,
        table,
        run_picker,
        open_button,
        resume_button,
        stop_button,
        delete_button,
        confirm_delete_button,
        cleanup_buttons,
        message,
        name_box,
        notes_box,
        save_notes_button,
        compare_box,
        diff_note,
        diff,
        history,
    )


def wire_runs_tab(
    handlers: RunsTab,
    panel: RunsPanel,
    poll_seconds: float,
    switch_to_run: list,
    follow_run: dict,
    eval_run: gr.Dropdown,
    session_seconds: float,
) -> RunsEvents:
    """The Runs tab's events. Open and Resume write `switch_to_run` (the Train tab's message, run
    box, timer, viewed state, and the Tabs) and then `follow_run` (the form takes that run's
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
    p.table.select(handlers.on_table_select, None, p.run_picker, **PRIVATE)
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
    return RunsEvents(hide=hide, refresh=refresh)
