"""The Runs tab as a user meets it, through the page's event functions (no browser): a run that
trains keeps moving, comparing redraws at once, runs get names and notes that survive a restart,
the table filters and sorts, compared configs are diffed, different games are warned about, and
Delete on a running run says to stop it first instead of offering a confirmation it then refuses.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import re
import threading
from pathlib import Path

import gradio as gr
import pytest

from studio import compare, runs_table, views
from studio.callbacks import Studio
from studio.history import RunState
from studio.runs import RunError, RunManager
from test_studio_runs import CONFIG, fake_endless_trainer, fake_trainer, wait_for
from trainer.run.layout import NOTES_FILE, create_run_dir, write_config
from trainer.run.notes import MAX_RUN_NAME_CHARS, RunNotes

SKIP = gr.skip()


def make_studio(tmp_path, target=fake_trainer, **kwargs) -> Studio:
    return Studio(RunManager(tmp_path / "runs", target=target, max_concurrent_runs=3), **kwargs)


def reward_traces(update) -> list[dict]:
    """The smoothed curves (one per run) of a reward chart update, as plotly sees them."""
    return [trace for trace in json.loads(update.plot)["data"] if not trace["name"].endswith("(raw)")]


def finished_run(studio: Studio, **config) -> str:
    """A finished run in the runs folder, trained in this process (no spawn: quick)."""
    config = {**CONFIG, **config}
    run_dir = create_run_dir(config, studio.manager.runs_dir)
    write_config(run_dir, config)
    fake_trainer(config, str(run_dir), None, threading.Event(), False)
    return run_dir.name


@contextlib.contextmanager
def training_run(studio: Studio, run_dir: Path | None = None):
    """A run that trains (in a thread of this process, which owns its folder) until the block ends."""
    if run_dir is None:
        run_dir = create_run_dir(CONFIG, studio.manager.runs_dir)
        write_config(run_dir, CONFIG)
    stop = threading.Event()
    thread = threading.Thread(target=fake_endless_trainer, args=(CONFIG, str(run_dir), None, stop, False))
    thread.start()
    try:
        wait_for(lambda: studio.manager.get(run_dir.name).step >= 300)
        yield run_dir.name
    finally:
        stop.set()
        thread.join(20)


def table_rows(table) -> list[list]:
    """The rows a Runs table update shows (views.runs_table: a pandas Styler over the rows)."""
    return table.data.astype(object).where(table.data.notna(), None).values.tolist()


def shown_step(status_html: str) -> int:
    """The step the status line shows (exactly, in the title of its "step 12.3k")."""
    return int(re.search(r'step <b><span title="([\d,]+)"', status_html).group(1).replace(",", ""))


def timer_active(update) -> bool | None:
    return None if update == SKIP else update.active


# ----------------------------------------------------------------------------- live refresh, compare


def test_a_training_run_keeps_moving_and_compare_redraws_at_once(tmp_path):
    studio = make_studio(tmp_path, chart_seconds=30.0)  # the throttle can never be what lets a redraw through
    done = finished_run(studio)
    with training_run(studio) as live:
        *view, timer, viewed = studio.show_selected(live, [], {}, True)
        assert timer_active(timer) is True  # the Runs tab shows a training run: its timer runs
        assert len(reward_traces(view[1])) == 1
        first_step = studio.manager.get(live).step

        # Ticking the finished run a moment later: two curves at once, although the selected run
        # trains and its chart was drawn well under chart_seconds ago.
        *view, timer, viewed = studio.show_selected(live, [live, done], viewed, True)
        assert [trace["name"] for trace in reward_traces(view[1])] == [live, done]

        wait_for(lambda: studio.manager.get(live).step >= first_step + 500)
        tick = studio.on_runs_tick(live, [live, done], viewed, True, "all", "all", "newest first")
        assert shown_step(tick[0]) >= first_step + 500  # the status line moved with the run
        assert timer_active(tick[-2]) is None  # still training: the timer keeps running (gr.skip())

        # Leaving the tab switches the timer off, whatever the run does.
        hidden = studio.on_runs_tick(live, [live, done], tick[-1], False, "all", "all", "newest first")
        assert timer_active(hidden[-2]) is False and all(update == SKIP for update in hidden[:-2])
    wait_for(lambda: not studio.manager.get(live).is_active)
    final = studio.on_runs_tick(live, [live, done], tick[-1], True, "all", "all", "newest first")
    assert "stopped" in final[0] and timer_active(final[-2]) is False  # ended: one last draw, then off
    assert len(reward_traces(final[1])) == 2


def test_a_finished_run_needs_no_timer_and_sends_nothing_twice(tmp_path):
    studio = make_studio(tmp_path)
    done = finished_run(studio)
    *view, timer, viewed = studio.show_selected(done, [], {}, True)
    assert timer_active(timer) is False and view[1] != SKIP
    *again, timer, viewed = studio.show_selected(done, [], viewed, True)
    assert again[0] == view[0] and again[1:] == [SKIP] * (len(again) - 1)  # only the status line again


def test_a_run_started_outside_the_studio_appears_on_refresh_and_moves(tmp_path):
    """A CLI run: another process owns the folder and writes its events; the studio only reads."""
    studio = make_studio(tmp_path)
    table, *_ = studio.on_refresh_runs(None, [], "all", "all", "newest first")
    assert table_rows(table) == []
    run_dir = create_run_dir(CONFIG, studio.manager.runs_dir)
    write_config(run_dir, CONFIG)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=fake_endless_trainer, args=(CONFIG, str(run_dir), None, stop, False))
    process.start()
    try:
        wait_for(lambda: (run_dir / "owner.json").exists() and studio.manager.get(run_dir.name).step >= 100)
        table, picker, *_ = studio.on_refresh_runs(None, [], "all", "all", "newest first")
        rows = table_rows(table)
        assert [row[0] for row in rows] == [run_dir.name] and picker.value == run_dir.name
        assert rows[0][views.RUNS_TABLE_HEADERS.index("status")] == "running"
        *view, timer, viewed = studio.show_selected(run_dir.name, [], {}, True)
        assert timer_active(timer) is True
        step = studio.manager.get(run_dir.name).step
        wait_for(lambda: studio.manager.get(run_dir.name).step > step + 200)
        tick = studio.on_runs_tick(run_dir.name, [], viewed, True, "all", "all", "newest first")
        assert shown_step(tick[0]) > step
    finally:
        stop.set()
        process.join(20)
    wait_for(lambda: studio.manager.get(run_dir.name).status == "stopped")


def test_a_cli_run_seen_before_its_trainer_took_the_folder_is_not_called_interrupted_once_it_trains(tmp_path):
    studio = make_studio(tmp_path)
    run_dir = create_run_dir(CONFIG, studio.manager.runs_dir)
    write_config(run_dir, CONFIG)  # the CLI writes config.yaml before its trainer owns the folder
    assert studio.manager.get(run_dir.name).status == "interrupted"
    with training_run(studio, run_dir) as run_id:
        run = studio.manager.get(run_id)
        assert run.status == "running" and run.error_message is None
        assert "interrupted" not in views.status_html(run) and "without an end event" not in views.status_html(run)


# ----------------------------------------------------------------------------- names and notes


def test_names_and_notes_are_stored_in_the_run_folder_and_come_back_after_a_restart(tmp_path):
    studio = make_studio(tmp_path)
    run_id = finished_run(studio)
    message = studio.on_save_notes(run_id, "  baseline, lr 3e-4 ", "First try.\r\nEntropy fell early.")
    assert "Saved" in message and "baseline, lr 3e-4" in message
    stored = json.loads((studio.manager.runs_dir / run_id / NOTES_FILE).read_text(encoding="utf-8"))
    assert stored == {"name": "baseline, lr 3e-4", "notes": "First try.\nEntropy fell early."}

    restarted = make_studio(tmp_path)  # a new studio on the same folder
    run = restarted.manager.get(run_id)
    assert (run.name, run.notes) == ("baseline, lr 3e-4", "First try.\nEntropy fell early.")
    table, picker, compare, *_ = restarted.on_refresh_runs(None, [], "all", "all", "newest first")
    assert table_rows(table)[0][views.RUNS_TABLE_HEADERS.index("name")] == "baseline, lr 3e-4"
    assert ("baseline, lr 3e-4 (" + run_id + ")", run_id) in picker.choices
    assert "baseline, lr 3e-4" in views.status_html(run)
    name_box, notes_box = restarted.run_notes_fields(run_id)
    assert name_box.value == "baseline, lr 3e-4" and notes_box.value.startswith("First try.")

    # Another tab (or studio) renames it: the next look shows the new name.
    studio.on_save_notes(run_id, "renamed", "")
    assert restarted.manager.get(run_id).name == "renamed"
    assert "Cleared" in studio.on_save_notes(run_id, "", "")
    assert restarted.manager.get(run_id).name == ""


BAD_NOTES = [
    ("x" * 5000, "", f"The name is 5,000 characters long; a name is at most {MAX_RUN_NAME_CHARS}"),
    ("two\nlines", "", "The name holds a control character (U+000A at character 4)"),
    ("bell\x07", "", "U+0007"),
    ("ok", "y" * 100_000, "The notes are 100,000 characters long"),
    ("ok", "escape \x1b[31m red", "The notes hold a control character (U+001B"),
]


def test_bad_names_and_notes_get_a_clear_message_and_change_nothing(tmp_path):
    studio = make_studio(tmp_path)
    run_id = finished_run(studio)
    studio.on_save_notes(run_id, "kept", "kept notes")
    for name, notes, expected in BAD_NOTES:
        message = studio.on_save_notes(run_id, name, notes)
        assert expected in message and message.startswith("**"), message[:200]
        assert make_studio(tmp_path).manager.get(run_id).name == "kept"  # nothing written
    with pytest.raises(RunError, match="No run selected"):
        studio.manager.annotate("", "a", "b")


def test_a_hand_broken_notes_file_never_breaks_the_listing(tmp_path):
    studio = make_studio(tmp_path)
    run_id = finished_run(studio)
    (studio.manager.runs_dir / run_id / NOTES_FILE).write_text('{"name": "bad\\u0000name"}')
    assert make_studio(tmp_path).manager.get(run_id).name == ""
    (studio.manager.runs_dir / run_id / NOTES_FILE).write_text("[1, 2")
    assert make_studio(tmp_path).manager.list_runs()[0].name == ""


# ----------------------------------------------------------------------------- table, diff, delete


def snapshot(run_id: str, status: str, config: dict, started: float, best: float | None = None, name: str = ""):
    state = RunState(run_id=run_id, run_dir=Path("/nonexistent") / run_id)
    state.apply({"type": "start", "time": started, "config": config, "total_timesteps": 1000})
    if best is not None:
        state.apply({"type": "metrics", "time": started + 1, "step": 100, "episode_return_mean": best})
    if status != "running":
        state.apply({"type": "end", "time": started + 2, "status": status, "step": 100})
    state.notes = RunNotes(name=name)
    return state.snapshot()


def test_the_table_filters_by_game_and_status_and_sorts():
    runs = [
        snapshot("a", "finished", {"env_name": "cartpole"}, 100.0, best=500.0),
        snapshot("b", "failed", {"env_name": "snake"}, 200.0, best=3.0),
        snapshot("c", "running", {"env_name": "cartpole"}, 300.0, best=120.0),
        snapshot("d", "stopped", {"env_name": "flappy_bird"}, 50.0),
    ]
    ids = lambda shown: [run.run_id for run in shown]  # noqa: E731
    assert ids(runs_table.table_runs(runs)) == ["c", "b", "a", "d"]  # newest first
    assert ids(runs_table.table_runs(runs, game="cartpole")) == ["c", "a"]
    assert ids(runs_table.table_runs(runs, status="active")) == ["c"]
    assert ids(runs_table.table_runs(runs, game="cartpole", status="finished")) == ["a"]
    assert ids(runs_table.table_runs(runs, order="best return")) == ["a", "c", "b", "d"]  # no return: last
    assert ids(runs_table.table_runs(runs, order="status")) == ["c", "b", "d", "a"]
    assert ids(runs_table.table_runs(runs, order="oldest first")) == ["d", "a", "b", "c"]
    assert runs_table.game_filter_choices(runs) == ["all", "cartpole", "flappy_bird", "snake"]
    assert runs_table.filter_note(2, 4) == "Showing 2 of 4 runs (the filters hide 2)."


def test_the_table_handler_applies_the_filters(tmp_path):
    studio = make_studio(tmp_path)
    finished_run(studio)
    finished_run(studio, env_name="snake", seed=2)
    table, note = studio.runs_table("snake", "all", "newest first")
    assert [row[views.RUNS_TABLE_HEADERS.index("env")] for row in table_rows(table)] == ["snake"]
    assert note == "Showing 1 of 2 runs (the filters hide 1)."
    *_, games, _ = studio.on_refresh_runs(None, [], "nosuchgame", "all", "newest first")
    assert games.value == "all" and games.choices == [("all", "all"), ("cartpole", "cartpole"), ("snake", "snake")]


def test_the_config_diff_lists_only_the_keys_that_differ():
    base = {
        "env_name": "cartpole",
        "learning_rate": 3e-4,
        "num_envs": 8,
        "checkpoint": {"keep": 3, "interval": 10},
        "policy_kwargs": None,
    }
    runs = [
        snapshot("a", "finished", base, 1.0),
        snapshot("b", "finished", {**base, "learning_rate": 1e-3, "checkpoint": {"keep": 5, "interval": 10}}, 2.0),
        snapshot("c", "finished", {**base, "vector_env": True}, 3.0),
    ]
    headers, rows = compare.config_diff(runs)
    assert headers == ["key", "a", "b", "c"]
    assert rows == [
        ["checkpoint.keep", "3", "5", "3"],
        ["learning_rate", "0.0003", "0.001", "0.0003"],
        ["vector_env", compare.ABSENT, compare.ABSENT, "true"],
    ]
    assert compare.config_diff(runs[:1])[1] == [] and compare.config_diff([runs[0], runs[0]])[1] == []


def test_compare_warns_when_the_games_differ(tmp_path):
    studio = make_studio(tmp_path)
    cartpole = finished_run(studio)
    snake = finished_run(studio, env_name="snake")
    note, diff = studio.on_compare_change(cartpole, [snake])
    assert "different games (cartpole, snake)" in note and "1 setting(s) differ" in note
    assert diff.visible and diff.value["data"] == [["env_name", "cartpole", "snake"]]
    same = finished_run(studio, seed=7)
    note, diff = studio.on_compare_change(cartpole, [same])
    assert "different games" not in note and diff.value["data"] == [["seed", "1", "7"]]
    note, diff = studio.on_compare_change(cartpole, [])
    assert "Tick two or more runs" in note and not diff.visible


def test_delete_on_a_running_run_says_stop_first_and_offers_no_confirmation(tmp_path):
    studio = make_studio(tmp_path)
    with training_run(studio) as run_id:
        message, confirm = studio.on_delete_request(run_id)
        assert "is running: stop it first" in message and confirm.visible is False
    wait_for(lambda: not studio.manager.get(run_id).is_active)
    message, confirm = studio.on_delete_request(run_id)
    assert "Click *Confirm delete*" in message and confirm.visible is True
    assert studio.on_delete_confirm(run_id)[0] == f"Deleted **{run_id}**."
