"""The Sweeps tab's reading and form (studio/sweep_view.py, sweep_form.py, sweeps_tab.py) on a real
Optuna study laid out as `python -m trainer sweep` leaves it: the trials table says each trial's
state, value, params, steps and where it was pruned; the curves fade the pruned trials; Optuna's
parallel-coordinate and importance plots fill once trials finish (a note before); the form's rows
come from the keys' declarations and make a sweep file the trainer accepts; the best trial's
config goes into the Train form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from studio.form import FORM_FIELDS, FormError  # noqa: E402
from studio.sweep_form import check_sweep, space_row, studio_sweep, sweep_text, sweepable_names  # noqa: E402
from studio.sweep_view import (  # noqa: E402
    TRIAL_COLUMNS,
    curves_figure,
    importance_figure,
    known_sweep,
    parallel_figure,
    read_sweep_view,
    sweep_names,
    sweep_stamp,
)
from trainer.config.defaults import shipped_config  # noqa: E402
from trainer.run.layout import best_config_path, events_path, sweep_folder, trial_run_path  # noqa: E402
from trainer.sweep import study as book  # noqa: E402

BUDGET, REPORTS, UPDATE = 4096, 20, 512
METRIC = "recent_score_mean"
SPACE = {
    "learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
    "num_envs": optuna.distributions.CategoricalDistribution([8, 16]),
}


def write_run(run_dir: Path, scores: list[float], status: str | None) -> None:
    """A trial's run folder: one metrics event an update, and an end event once it ended."""
    run_dir.mkdir(parents=True, exist_ok=True)
    events = [{"type": "start", "step": 0}]
    events += [{"type": "metrics", "step": UPDATE * (i + 1), METRIC: score} for i, score in enumerate(scores)]
    if status:
        events.append({"type": "end", "status": status, "step": UPDATE * len(scores)})
    events_path(run_dir).write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")


def add_trial(study, folder: Path, params: dict, scores: list[float], end: str) -> None:
    """A trial as the sweep runs it: its run folder, a report at each point its updates reach,
    and how it ended ("finished", "pruned", or "running")."""
    study.enqueue_trial(params)  # the values it samples
    trial = study.ask(SPACE)
    run_dir = trial_run_path(folder, trial.number, 1)
    trial.set_user_attr("run_dirs", [str(run_dir.relative_to(folder))])
    for index, score in enumerate(scores):
        trial.report(score, (index + 1) * UPDATE * REPORTS // BUDGET)
    write_run(run_dir, scores, {"finished": "finished", "pruned": "stopped"}.get(end))
    if end == "finished":
        study.tell(trial, scores[-1])
    elif end == "pruned":
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)


def make_sweep(runs: Path, name: str, finished: int = 2) -> Path:
    """A sweep folder holding a real study: `finished` finished trials, one pruned at its second
    update, one running."""
    folder = sweep_folder(runs, name)
    folder.mkdir(parents=True)
    storage = book.open_storage(book.storage_url(None, folder))
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    study.set_user_attr(book.DEFINITION, {"base": {"total_timesteps": BUDGET}, "objective": {"metric": METRIC}})
    for number in range(finished):
        rate = 1e-3 * (number + 1)
        add_trial(
            study, folder, {"learning_rate": rate, "num_envs": 8 * (number + 1)}, [10, 20 + number * 5] * 4, "finished"
        )
    add_trial(study, folder, {"learning_rate": 5e-3, "num_envs": 16}, [9, 8], "pruned")
    add_trial(study, folder, {"learning_rate": 2e-3, "num_envs": 8}, [12], "running")
    return folder


def test_the_trials_table_shows_state_value_params_steps_and_where_a_trial_was_pruned(tmp_path):
    view = read_sweep_view(make_sweep(tmp_path / "runs", "tiny"))
    rows = {row[0]: dict(zip(TRIAL_COLUMNS, row)) for row in view.rows}
    assert [row[0] for row in view.rows] == sorted(rows, reverse=True)  # the newest trial first
    assert [rows[n]["state"] for n in sorted(rows)] == ["finished", "finished", "pruned", "running"]
    assert (
        rows[1]["value"] == "25" and "learning_rate=0.002" in rows[1]["params"] and "num_envs=16" in rows[1]["params"]
    )
    assert rows[0]["steps"] == BUDGET and rows[3]["steps"] == UPDATE
    assert rows[2]["pruned at"] == 2 * UPDATE and rows[2]["steps"] == 2 * UPDATE  # its last report's update
    assert rows[0]["pruned at"] == "" and rows[3]["value"] == ""
    assert "trial 1" in view.summary() and "2 finished" in view.summary() and "1 running" in view.summary()


def test_the_curves_fade_pruned_trials_and_the_plots_fill_once_trials_finish(tmp_path):
    view = read_sweep_view(make_sweep(tmp_path / "runs", "tiny"))
    curves = {trace["name"]: trace for trace in json.loads(curves_figure(view))["data"]}
    assert set(curves) == {"trial 0 (finished)", "trial 1 (finished)", "trial 2 (pruned)", "trial 3 (running)"}
    assert curves["trial 2 (pruned)"]["opacity"] < curves["trial 0 (finished)"]["opacity"]
    assert curves["trial 1 (finished)"]["line"]["width"] > curves["trial 0 (finished)"]["line"]["width"]  # the best
    parallel = json.loads(parallel_figure(view))
    assert parallel["data"] and "learning_rate" in json.dumps(parallel) and "num_envs" in json.dumps(parallel)
    importance = json.loads(importance_figure(view))
    bars = [trace for trace in importance["data"] if trace["type"] == "bar"]
    assert bars and {"learning_rate", "num_envs"} <= set(bars[0]["y"])


def test_before_two_trials_finish_the_plots_say_what_they_wait_for(tmp_path):
    view = read_sweep_view(make_sweep(tmp_path / "runs", "young", finished=1))
    importance = json.loads(importance_figure(view))
    assert not importance["data"] and "needs 2 finished trials (1 so far)" in json.dumps(importance)
    assert json.loads(parallel_figure(view))["data"]  # one finished trial is a line already
    empty = read_sweep_view(make_sweep(tmp_path / "runs", "new", finished=0))
    assert "appears when a trial finishes" in json.dumps(json.loads(parallel_figure(empty)))


def test_sweeps_are_found_newest_first_and_a_name_from_the_page_must_be_listed(tmp_path):
    runs = tmp_path / "runs"
    old = make_sweep(runs, "old", finished=1)
    new = make_sweep(runs, "new", finished=1)
    assert sweep_names(runs) == ["new", "old"]
    assert known_sweep(runs, "old") == old and known_sweep(runs, "../old") is None and known_sweep(runs, None) is None
    stamp = sweep_stamp(new)
    assert sweep_stamp(new) == stamp  # nothing changed: the tab redraws nothing
    write_run(trial_run_path(new, 2, 1), [12, 13], None)  # the running trial's next update
    assert sweep_stamp(new) != stamp


def test_the_form_prefills_from_the_declarations_and_writes_a_sweep_file_the_trainer_accepts(tmp_path):
    base = shipped_config("cartpole").to_dict()
    assert "learning_rate" in sweepable_names("ppo") and "buffer_size" not in sweepable_names("ppo")
    assert "buffer_size" in sweepable_names("dqn") and "seed" not in sweepable_names("dqn")
    key, low, high, log, choices = space_row("learning_rate", base)
    assert float(low) < base["learning_rate"] < float(high) and log and not choices
    assert space_row("lr_scaling")[4] == "[none, sqrt, linear]"  # a choice key: its choices
    rows = [space_row("learning_rate", base), space_row("num_envs", base), ["gamma", "", "", False, "[0.95, 0.99]"]]
    text = sweep_text("cartpole", "ppo", rows, METRIC, "maximize", "final", 8192, "median")
    sweep, settings = studio_sweep(text, allow_custom_envs=False)
    assert sweep["base"] == "base.yaml" and settings["env_name"] == "cartpole"
    check_sweep(sweep, settings)  # read_sweep on it, as the sweep will: no problem
    with pytest.raises(Exception, match="gamma must be in"):
        check_sweep({**sweep, "space": {"gamma": {"low": 0.9, "high": 1.5}}}, settings)


def test_the_studio_refuses_a_sweep_that_reads_another_file_or_runs_code(tmp_path):
    with pytest.raises(FormError, match="shipped config"):
        studio_sweep("base: /etc/passwd\nspace: {gamma: [0.9]}\n", allow_custom_envs=False)
    with pytest.raises(FormError, match="allow-custom-envs"):
        studio_sweep("base: cartpole.yaml\nspace: {env_name: [os:system]}\n", allow_custom_envs=False)
    with pytest.raises(FormError, match="learning_rate: low must be a number"):
        sweep_text(
            "cartpole", "ppo", [["learning_rate", "abc", "1", False, ""]], METRIC, "maximize", "final", 1000, "median"
        )


def test_open_best_puts_the_best_trials_config_into_the_train_form(tmp_path):
    import gradio as gr

    from studio.callbacks import Studio
    from studio.runs import RunManager
    from trainer.config.safe_yaml import dump_yaml

    runs = tmp_path / "runs"
    folder = make_sweep(runs, "tiny")
    manager = RunManager(runs)
    try:
        studio = Studio(manager)
        *_, message = studio.on_open_best("tiny")
        assert "no best trial yet" in message  # no best.yaml written yet
        best = shipped_config("cartpole", {"learning_rate": 0.00123, "num_envs": 16}).to_dict()
        best_config_path(folder).write_text(dump_yaml(best), encoding="utf-8")
        *values, train_message, tabs, message = studio.on_open_best("tiny")
        form = dict(zip((form_field.key for form_field in FORM_FIELDS), values))
        assert form["learning_rate"] == 0.00123 and form["num_envs"] == 16 and form["env_name"] == "cartpole"
        assert "best trial's config of the sweep **tiny**" in train_message and tabs.selected == "train"
        assert studio.on_open_best("../tiny")[-1] == "**Pick a sweep first.**"

        # The live view: drawn once, then nothing re-sent while no file of the sweep changes; the
        # timer keeps going while a trial runs.
        first = studio.on_sweep_tick("tiny", {})
        summary, rows, *_, timer, viewed = first
        assert "best: trial 1" in summary and len(rows) == 4 and timer == gr.skip()  # trial 3 runs
        again = studio.on_sweep_tick("tiny", viewed)
        assert len(again) == len(first) and all(update == gr.skip() for update in again[:-1]), again
        write_run(trial_run_path(folder, 3, 1), [12, 13], None)  # the running trial's next update
        _, _, curves, parallel, importance, *_ = studio.on_sweep_tick("tiny", viewed)
        assert curves != gr.skip() and parallel == importance == gr.skip()  # no trial finished since

        # Start refuses a sweep file the trainer would refuse, naming the key, and writes nothing.
        bad = "base: cartpole.yaml\nspace: {gamma: {low: 0.9, high: 1.5}}\n"
        message, *_ = studio.on_start_sweep("bad", bad, 2, 1, "cartpole", "ppo")
        assert "gamma must be in" in message and not (runs / "sweeps" / "bad").exists()
        message, *_ = studio.on_start_sweep("tiny", bad, 2, 1, "cartpole", "ppo")
        assert "A sweep named tiny exists" in message
    finally:
        manager.shutdown()
