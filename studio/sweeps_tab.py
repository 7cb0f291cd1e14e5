"""The Sweeps tab: build a sweep's space in a form from the keys' declarations (studio/sweep_form.py)
or paste a sweep file; start, stop and continue it (studio/sweep_jobs.py: `python -m trainer sweep`
in its own process); a live table of its trials, their curves on one chart, Optuna's
parallel-coordinate and importance plots (studio/sweep_view.py); and the best trial's config
into the Train form.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from gradio.components.plot import PlotData

from studio import sweep_form
from studio.form import FORM_FIELDS, FormError, config_from_yaml_text, tuned_config
from studio.handlers import PRIVATE, USER_ERRORS, bold_message
from studio.sweep_jobs import SweepError, SweepJobs
from studio.sweep_view import (
    TRIAL_COLUMNS,
    SweepView,
    curves_figure,
    importance_figure,
    known_sweep,
    parallel_figure,
    read_sweep_view,
    sweep_log,
    sweep_names,
    sweep_stamp,
)
from studio.train_form import FormHandlers
from trainer.config.safe_yaml import dump_yaml
from trainer.run.files import atomic_write
from trainer.run.layout import SWEEP_BASE_FILE, SWEEP_FILE, best_config_path, safe_name, study_path, sweep_folder

DEFAULT_TRIALS, DEFAULT_JOBS, DEFAULT_BUDGET = 20, 1, 50_000


class SweepsTab(FormHandlers):
    """The Sweeps tab's event functions (the best config goes through the Train form's own
    `on_load_yaml`)."""

    @property
    def sweep_jobs(self) -> SweepJobs:
        jobs = getattr(self, "_sweep_jobs", None)
        if jobs is None:
            jobs = self._sweep_jobs = SweepJobs(self.manager.runs_dir, slots=self.manager.slots)
        return jobs

    # ---- the form

    def on_sweep_base_change(self, env_name: str, algo: str, rows):
        """A new game or algorithm: the keys it can tune, and the space's rows prefilled again
        from its config (the keys that algorithm does not take dropped)."""
        algo = algo or "ppo"
        names = sweep_form.sweepable_names(algo)
        try:
            base = tuned_config(env_name, algo)
        except USER_ERRORS as error:
            return gr.skip(), gr.skip(), bold_message(error)
        kept = [str(row[0]) for row in _rows(rows) if row and str(row[0]) in names]
        new_rows = [sweep_form.space_row(name, base) for name in kept or sweep_form.DEFAULT_KEYS]
        return gr.Dropdown(choices=names), new_rows, ""

    def on_add_key(self, key: str, rows, env_name: str, algo: str):
        """Add a key to the space, prefilled from its declaration and the base config's value."""
        if not key:
            return gr.skip(), "**Pick a key to add.**"
        current = _rows(rows)
        if any(row and row[0] == key for row in current):
            return gr.skip(), f"**{key} is in the space already.**"
        try:
            row = sweep_form.space_row(key, tuned_config(env_name, algo or "ppo"))
        except USER_ERRORS as error:
            return gr.skip(), bold_message(error)
        return [*current, row], ""

    def on_write_sweep_file(self, env_name, algo, rows, metric, direction, mode, budget, pruner):
        """The form as a sweep file, into the sweep file box (what Start runs)."""
        try:
            text = sweep_form.sweep_text(env_name, algo, _rows(rows), metric, direction, mode, budget, pruner)
        except USER_ERRORS as error:
            return gr.skip(), bold_message(error)
        return text, ""

    # ---- start, stop, continue

    def on_start_sweep(self, name: str, text: str, trials, jobs, env_name: str, algo: str):
        """Check the sweep file, write it (and its base) into a new sweep folder, and start it."""
        name = safe_name(name.strip()) if name and name.strip() else _new_name(env_name, algo)
        folder = sweep_folder(self.manager.runs_dir, name)
        try:
            trials, jobs = _whole(trials, "trials"), _whole(jobs, "jobs")
            if study_path(folder).exists() or (folder / SWEEP_FILE).exists():
                raise FormError(f"A sweep named {name} exists: pick it above and press Continue, or give a new name.")
            sweep, base = sweep_form.studio_sweep(text, self.allow_custom_envs)
            sweep_form.check_sweep(sweep, base)  # every problem listed before a folder exists
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(folder / SWEEP_BASE_FILE, dump_yaml(base))
            atomic_write(folder / SWEEP_FILE, dump_yaml(sweep))
            self.sweep_jobs.start(folder, trials, jobs)
        except (*USER_ERRORS, SweepError, OSError) as error:
            gr.Warning(str(error).splitlines()[0])
            return bold_message(error), gr.skip(), gr.skip()
        message = f"Started the sweep **{name}**: {trials} trials, {jobs} at once."
        return message, self.sweep_picker(name), gr.Timer(active=True)

    def on_stop_sweep(self, name: str):
        try:
            self.sweep_jobs.stop(name or "")
        except SweepError as error:
            return bold_message(error)
        return f"Stopping **{name}**: its running trials save and stop; **Continue** resumes them."

    def on_continue_sweep(self, name: str, trials, jobs):
        """Run the same sweep again: it runs the trials still missing to `trials`, and resumes
        the ones a stop left unfinished."""
        folder = known_sweep(self.manager.runs_dir, name)
        try:
            if folder is None:
                raise SweepError("Pick a sweep first.")
            self.sweep_jobs.start(folder, _whole(trials, "trials"), _whole(jobs, "jobs"))
        except (SweepError, FormError) as error:
            return bold_message(error), gr.skip()
        return f"Continuing **{name}** up to {_whole(trials, 'trials')} trials.", gr.Timer(active=True)

    def on_open_best(self, name: str):
        """The sweep's best.yaml into the Train form (as pasted YAML is), then the Train tab."""
        folder = known_sweep(self.manager.runs_dir, name)
        unchanged = [gr.skip()] * (len(FORM_FIELDS) + 2)  # the form, its message, the tabs
        if folder is None or not best_config_path(folder).is_file():
            why = "Pick a sweep first." if folder is None else f"{name} has no best trial yet (none has finished)."
            return *unchanged, bold_message(why)
        try:
            text = best_config_path(folder).read_text(encoding="utf-8")
            config_from_yaml_text(text)  # a config the form refuses stays here, with the reason
        except (*USER_ERRORS, OSError, UnicodeDecodeError) as error:
            return *unchanged, bold_message(f"{name}'s best.yaml does not fit the form: {error}")
        *values, _ = self.on_load_yaml(text)
        message = f"The form holds the best trial's config of the sweep **{name}** (its best.yaml)."
        return *values, message, gr.Tabs(selected="train"), ""

    # ---- the live view

    def sweep_picker(self, picked: str | None = None):
        names = sweep_names(self.manager.runs_dir)
        value = picked if picked in names else (names[0] if names else None)
        return gr.Dropdown(choices=names, value=value)

    def on_sweep_tick(self, name: str | None, viewed: dict):
        """The picked sweep: summary, trials, curves, plots, output, buttons; all skipped when no
        file of the sweep changed since this session drew it (one stat a file). The timer stops
        once no trial runs or waits and the studio's own process of the sweep has ended."""
        folder = known_sweep(self.manager.runs_dir, name)
        running = bool(name) and self.sweep_jobs.running(name)
        key = (name, sweep_stamp(folder) if folder is not None else None, running)
        if viewed.get("sweep") == key:
            live = running or viewed.get("sweep_live", False)
            return *[gr.skip()] * 8, gr.skip() if live else gr.Timer(active=False), viewed
        buttons = (gr.Button(interactive=running), gr.Button(interactive=not running and folder is not None))
        if folder is None:
            note = "No sweep yet: build one below and press **Start**."
            viewed = {**viewed, "sweep": key, "sweep_live": False}
            figures = _figures(SweepView("", Path()), viewed)
            return note, [], *figures, "", *buttons, gr.Timer(active=False), viewed
        view = read_sweep_view(folder)
        live = running or any(trial.state in ("running", "queued") for trial in view.trials)
        viewed = {**viewed, "sweep": key, "sweep_live": live}
        summary = view.summary() + (" Running." if running else "")
        timer = gr.skip() if live else gr.Timer(active=False)
        return summary, view.rows, *_figures(view, viewed), sweep_log(folder), *buttons, timer, viewed


def _figures(view: SweepView, viewed: dict) -> tuple:
    """The curves, and Optuna's two plots when the finished trials changed since this session
    drew them (they are drawn from those alone; the curves move with every update)."""
    curves = PlotData(type="plotly", plot=curves_figure(view))
    if viewed.get("sweep_plots") == view.finished_key:
        return curves, gr.skip(), gr.skip()
    viewed["sweep_plots"] = view.finished_key
    plots = (parallel_figure(view), importance_figure(view))
    return curves, *(PlotData(type="plotly", plot=text) for text in plots)


def _rows(rows) -> list[list]:
    """The space table's rows as lists (Gradio hands a DataFrame, a dict or lists)."""
    if rows is None:
        return []
    if hasattr(rows, "values") and hasattr(rows, "columns"):
        return [list(row) for row in rows.values.tolist()]
    if isinstance(rows, dict):
        return [list(row) for row in rows.get("data") or []]
    return [list(row) for row in rows]


def _whole(value, label: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise FormError(f"{label} must be a whole number, got {value!r}") from None
    if not number.is_integer() or number < 1:
        raise FormError(f"{label} must be a whole number of at least 1, got {value!r}")
    return int(number)


def _new_name(env_name: str | None, algo: str | None) -> str:
    return safe_name(f"{env_name or 'sweep'}-{algo or 'ppo'}-{time.strftime('%Y%m%d-%H%M%S')}")


# ----------------------------------------------------------------------------- components


@dataclass
class SweepsPanel:
    tab: gr.Tab
    picker: gr.Dropdown
    summary: gr.Markdown
    message: gr.Markdown
    buttons: dict
    form: dict
    sweep_file: gr.Code
    table: gr.Dataframe
    plots: tuple
    log: gr.Code


def build_sweeps_tab(handlers: SweepsTab, train, tabs: gr.Tabs, poll_seconds: float = 1.0) -> SweepsPanel:
    """The Sweeps tab, laid out and wired; `train`: the Train tab's panel (its form takes the best
    config), `tabs`: the page's tabs (Open best switches to Train)."""
    algo, env_name = "ppo", "cartpole"
    base = tuned_config(env_name, algo)
    rows = [sweep_form.space_row(name, base) for name in sweep_form.DEFAULT_KEYS]
    with gr.Tab("Sweeps", id="sweeps") as tab:
        with gr.Row():
            picker = gr.Dropdown(
                [], label="sweep", info="The sweeps of the runs folder, newest first", scale=3, elem_id="sweep-picker"
            )
            refresh = gr.Button("Refresh", size="sm", scale=0, min_width=90)
        summary = gr.Markdown(elem_id="sweep-summary")
        with gr.Row():
            buttons = {
                "start": gr.Button("Start", variant="primary", elem_id="sweep-start"),
                "stop": gr.Button("Stop", variant="stop", interactive=False, elem_id="sweep-stop"),
                "continue": gr.Button("Continue", interactive=False, elem_id="sweep-continue"),
                "best": gr.Button("Open the best trial's config in the Train form", elem_id="sweep-open-best"),
            }
        message = gr.Markdown(elem_id="sweep-message")
        with gr.Accordion("New sweep", open=True, elem_id="sweep-form"):
            with gr.Row():
                name = gr.Textbox(label="name", placeholder="blank: <game>-<algo>-<date>", elem_id="sweep-name")
                env = gr.Dropdown(_games(), value=env_name, label="game (base config)", allow_custom_value=True)
                algo_box = gr.Dropdown(_algos(), value=algo, label="algo")
                trials = gr.Number(DEFAULT_TRIALS, label="trials", precision=0, minimum=1, elem_id="sweep-trials")
                jobs = gr.Number(DEFAULT_JOBS, label="jobs (at once)", precision=0, minimum=1, elem_id="sweep-jobs")
            with gr.Row():
                key = gr.Dropdown(
                    sweep_form.sweepable_names(algo), label="key to tune", allow_custom_value=True, scale=3
                )
                add = gr.Button("Add key", size="sm", scale=0, min_width=100)
            space = gr.Dataframe(
                rows,
                headers=sweep_form.SPACE_COLUMNS,
                datatype=["str", "str", "str", "bool", "str"],
                type="array",
                interactive=True,
                label="space: a range (low, high, log) or choices ([32, 64, 128]) per key",
                elem_id="sweep-space",
            )
            with gr.Row():
                metric = gr.Dropdown(
                    sweep_form.objective_metrics(), value=sweep_form.objective_metrics()[0], label="objective metric"
                )
                direction = gr.Radio(list(sweep_form.DIRECTIONS), value="maximize", label="direction")
                mode = gr.Radio(list(sweep_form.MODES), value="final", label="mode")
                budget = gr.Number(
                    DEFAULT_BUDGET, label="total_timesteps per trial", precision=0, elem_id="sweep-budget"
                )
                pruner = gr.Dropdown(sweep_form.pruner_names(), value="median", label="pruner")
            form = {"name": name, "env": env, "algo": algo_box, "trials": trials, "jobs": jobs, "key": key, "add": add}
            form["space"] = space
            form |= {"metric": metric, "direction": direction, "mode": mode, "budget": budget, "pruner": pruner}
            sweep_file = gr.Code(
                sweep_form.sweep_text(
                    env_name, algo, rows, metric.value, "maximize", "final", DEFAULT_BUDGET, "median"
                ),
                language="yaml",
                label="the sweep file Start runs: written from the form, or paste your own (docs/sweeps.md)",
                interactive=True,
                elem_id="sweep-file",
            )
        table = gr.Dataframe(headers=TRIAL_COLUMNS, label="trials", interactive=False, elem_id="sweep-trials-table")
        curves = gr.Plot(show_label=False, elem_id="sweep-curves")
        with gr.Row():
            parallel = gr.Plot(show_label=False, elem_id="sweep-parallel")
            importance = gr.Plot(show_label=False, elem_id="sweep-importance")
        log = gr.Code(
            label="the sweep's output", language=None, interactive=False, lines=10, max_lines=20, elem_id="sweep-log"
        )
    panel = SweepsPanel(
        tab, picker, summary, message, buttons, form, sweep_file, table, (curves, parallel, importance), log
    )
    _wire(handlers, panel, train, tabs, refresh, poll_seconds)
    return panel


def _wire(handlers: SweepsTab, p: SweepsPanel, train, tabs: gr.Tabs, refresh: gr.Button, poll_seconds: float) -> None:
    f, b = p.form, p.buttons
    viewed = gr.State({})
    timer = gr.Timer(poll_seconds, active=False)
    live = [p.summary, p.table, *p.plots, p.log, b["stop"], b["continue"], timer, viewed]
    show = dict(fn=handlers.on_sweep_tick, inputs=[p.picker, viewed], outputs=live, show_progress="hidden", **PRIVATE)
    pick = dict(fn=handlers.sweep_picker, inputs=p.picker, outputs=p.picker, **PRIVATE)
    p.tab.select(lambda: gr.Timer(active=True), None, timer, **PRIVATE).then(**pick).then(**show)
    tabs.select(_leave, None, timer, **PRIVATE)
    refresh.click(**pick).then(**show)
    p.picker.change(lambda: gr.Timer(active=True), None, timer, **PRIVATE).then(**show)
    timer.tick(**show)
    form_inputs = [f["env"], f["algo"], f["space"], f["metric"], f["direction"], f["mode"], f["budget"], f["pruner"]]
    write = dict(fn=handlers.on_write_sweep_file, inputs=form_inputs, outputs=[p.sweep_file, p.message], **PRIVATE)
    for name in ("env", "algo"):
        f[name].input(
            handlers.on_sweep_base_change,
            [f["env"], f["algo"], f["space"]],
            [f["key"], f["space"], p.message],
            **PRIVATE,
        ).then(**write)
    f["space"].input(**write)
    for name in ("metric", "direction", "mode", "budget", "pruner"):
        f[name].input(**write)
    f["add"].click(
        handlers.on_add_key, [f["key"], f["space"], f["env"], f["algo"]], [f["space"], p.message], **PRIVATE
    ).then(**write)
    b["start"].click(
        handlers.on_start_sweep,
        [f["name"], p.sweep_file, f["trials"], f["jobs"], f["env"], f["algo"]],
        [p.message, p.picker, timer],
        **PRIVATE,
    )
    b["stop"].click(handlers.on_stop_sweep, p.picker, p.message, **PRIVATE)
    b["continue"].click(handlers.on_continue_sweep, [p.picker, f["trials"], f["jobs"]], [p.message, timer], **PRIVATE)
    b["best"].click(handlers.on_open_best, p.picker, [*train.form.inputs, train.message, tabs, p.message], **PRIVATE)


def _leave(event: gr.SelectData):
    """Another tab shown (the event's value is its label): the Sweeps tab's timer stops; its own
    select starts it again."""
    if isinstance(event.value, str) and event.value != "Sweeps":
        return gr.Timer(active=False)
    return gr.skip()


def _games() -> list[str]:
    from envs import builtin_env_names

    return list(builtin_env_names())


def _algos() -> list[str]:
    """The algorithms the Train form offers (its `algo` field's choices)."""
    return list(next(form_field for form_field in FORM_FIELDS if form_field.key == "algo").choices)
