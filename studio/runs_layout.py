"""The Runs tab's components: the filters, the table, the selected run's actions, its name and
notes, the compare box and config diff, and the run view (studio/run_view.py). The tab's event
functions and wiring are studio/runs_tab.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from studio import views
from studio.retention import build_cleanup_buttons
from studio.run_view import RunView, build_run_view
from studio.runs_table import ALL, DEFAULT_SORT, SORT_ORDERS, STATUS_FILTERS


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
            headers=views.RUNS_TABLE_HEADERS,
            column_widths=views.RUNS_TABLE_WIDTHS,  # the key columns first: a phone shows run and status
            interactive=False,
            wrap=True,
            max_height=360,
            elem_id="runs-table",
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
