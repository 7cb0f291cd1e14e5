"""The studio's event handlers: what each button, timer and API endpoint does.

`Studio` holds the RunManager and turns its snapshots into component updates; `studio.ui` lays
out the page and wires these methods to it. Nothing here builds components.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Sequence

import gradio as gr
from gradio.components.plot import PlotData

from studio import runs_tab, views
from studio.charts import ChartOptions, CurveSource, diagnostics_figure, reward_figure, system_figure
from studio.cluster_view import run_nodes_html
from studio.form import (
    FORM_FIELDS,
    ConfigError,
    FormError,
    check_web_safety,
    config_from_yaml_text,
    form_values,
    tuned_config,
    validated_config,
    yaml_from_config,
)
from studio.runs import RunError, RunManager, RunSnapshot, RunState, safe_run_file
from studio.evaluate import runs_with_models
from studio.scratch import ScratchFolder, hide_server_paths
from studio.system import SystemMonitor
from trainer.config.keys import TrainConfig, config_from_dict, merge_settings
from trainer.config.defaults import defaults_source
from trainer.run.run_dir import atomic_write, checkpoint_folder, config_path, list_checkpoints, safe_name
from trainer.config.safe_yaml import MAX_YAML_BYTES

DEFAULT_ENV = "cartpole"
FILES_SECONDS = 15.0  # while a run trains, refresh its download buttons at most this often
TABLE_SECONDS = 10.0  # while the Runs tab follows a training run, refresh its table at most this often
DOWNLOAD_KINDS = ("model", "checkpoint", "config", "metrics")
USER_ERRORS = (FormError, ConfigError, RunError)
LOG = logging.getLogger("studio")


# ----------------------------------------------------------------------------- the studio


class Studio:
    """The page's event functions. Shared state: the RunManager (and a usage sampler)."""

    def __init__(self, manager: RunManager, allow_custom_envs: bool = False,
                 monitor: SystemMonitor | None = None, poll_seconds: float = 1.0, chart_seconds: float = 2.0,
                 scratch: ScratchFolder | None = None):
        self.manager = manager
        self.allow_custom_envs = allow_custom_envs
        self.monitor = monitor or SystemMonitor()
        self.poll_seconds = poll_seconds
        self.chart_seconds = chart_seconds
        # Exported YAML, evaluation GIFs, ONNX files (and, launched, Gradio's uploads) are the
        # studio's own, not a run's: one temp folder for this studio, removed when it exits.
        self.scratch = scratch or ScratchFolder()

    # ---- helpers

    def _snapshot(self, run_id: str | None) -> RunSnapshot | None:
        if not run_id:
            return None
        try:
            return self.manager.get(run_id)
        except RunError:
            return None

    def _file(self, path: str | os.PathLike | None) -> str | None:
        return safe_run_file(self.manager.runs_dir, path)

    def _run_files(self, run: RunSnapshot, write_csv: bool) -> dict[str, str | None]:
        csv_path = None
        if write_csv and run.update_count:
            csv_path = views.write_metrics_csv(run)
        elif (Path(run.run_dir) / "metrics.csv").exists():
            csv_path = str(Path(run.run_dir) / "metrics.csv")
        return {
            "model": self._file(run.final_model),
            "checkpoint": self._file(run.latest_checkpoint),
            "config": self._file(config_path(run.run_dir)),
            "metrics": self._file(csv_path),
        }

    # ---- showing a run

    def render_run(self, run: RunSnapshot | None, overlays: Sequence[RunSnapshot], viewed: dict,
                   with_log: bool, chart: ChartOptions | None = None) -> tuple[list, dict]:
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
            updates += ([gr.Image(value=None), views.gif_caption_html(None)] if changed("gif", None)
                        else [gr.skip(), gr.skip()])
            updates += [(views.log_html("") if changed("log", None) else gr.skip())] if with_log else []
            updates += [plot_data(diagnostics_figure([])) if empty else gr.skip()]
            updates += [gr.DownloadButton(value=None, interactive=False) if changed(f"file-{kind}", None) else gr.skip()
                        for kind in DOWNLOAD_KINDS]
            return updates, viewed

        sources = [run] + [other for other in overlays if other.run_id != run.run_id]
        chart_key = (chart, *((source.run_id, source.update_count, source.status) for source in sources))
        curves = [CurveSource(source.run_id, source.metrics, source.env_name) for source in sources]
        # Redrawing plotly charts costs the browser more than anything else on the page: at most
        # every `chart_seconds` while a shown run trains, and once more when it ends; at once when
        # the runs shown change (a new selection, a run ticked to compare).
        shown_ids = tuple(source.run_id for source in sources)
        due = (not any(source.is_active for source in sources) or viewed.get("charts_runs") != shown_ids
               or time.time() - viewed.get("charts_at", 0.0) >= self.chart_seconds)
        charts_changed = due and changed("charts", chart_key)
        if charts_changed:
            viewed["charts_at"], viewed["charts_runs"] = time.time(), shown_ids
        updates: list = [views.status_html(run)]
        updates.append(plot_data(reward_figure(curves, **chart.kwargs())) if charts_changed else gr.skip())

        gif = run.latest_gif
        gif_path = self._file(gif.path) if gif else None
        if changed("gif", (run.run_id, gif_path)):
            updates += [gr.Image(value=gif_path),
                        views.gif_caption_html(gif if gif_path else None, run.config.get("env_name"))]
        else:
            updates += [gr.skip(), gr.skip()]
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

    def on_tick(self, run_id: str, viewed: dict, *chart_controls):
        """Timer tick of the live view: the run's state, charts, GIF, log, files, machine load, nodes.
        Also what a change of the chart's controls calls: a changed option redraws the charts."""
        run = self._snapshot(run_id)
        updates, viewed = self.render_run(run, [], viewed, with_log=True,
                                          chart=ChartOptions.from_controls(*chart_controls))
        active = run is not None and run.is_active
        can_stop = active and run.status != "stopping"
        stop_button = gr.Button(interactive=can_stop) if changed_value(viewed, "can_stop", can_stop) else gr.skip()
        samples = self.monitor.sample()  # a new reading at most every few seconds, shared by all tabs
        new_sample = bool(samples) and changed_value(viewed, "usage_at", samples[-1].time)
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

    # ---- the form

    def on_env_change(self, env_name: str):
        """Fill the form from the env's tuned config (configs/<env>.yaml), or from the defaults when
        it has none, when the env changes; the message says which of the two it was."""
        try:
            config = tuned_config(env_name)
        except USER_ERRORS as error:
            return [gr.skip()] * len(FORM_FIELDS) + [_message(error)]
        values = form_values(config)
        keep = {"env_name", "device"}
        updates = [gr.skip() if form_field.key in keep else value for form_field, value in zip(FORM_FIELDS, values)]
        return updates + [env_fill_message(env_name)]

    def on_start(self, *values):
        """Validate the form and start a run. Returns message, run id, timer, viewed."""
        try:
            state = self.start_run(validated_config(values, self.allow_custom_envs))
        except USER_ERRORS as error:
            gr.Warning(str(error).splitlines()[0])
            return _message(error), gr.skip(), gr.skip(), gr.skip()
        return (f"Started **{state.run_id}**.{self.join_note(state.run_id)}", state.run_id, gr.Timer(active=True),
                self.join_state(state.run_id))

    def join_note(self, run_id: str) -> str:
        """For the page that started a run that accepts workers: where it listens and the worker
        command with the token (said nowhere else: not in the log, the Runs tab or /poll)."""
        join = self.manager.worker_join(run_id)
        if join is None:
            return ""
        note = (f"\n\nIt accepts workers on `{join.master}`: on each worker machine run\n\n"
                f"    {join.command}\n\n(the token is shown only on this page).")
        if join.master.startswith(("127.", "localhost", "[::1]", "::1")):
            note += (" The master listens on this machine only; start the studio with `--cluster-host ADDRESS` "
                     "to let other machines join.")
        return note

    def join_state(self, run_id: str) -> dict:
        """A fresh `viewed` state that remembers the worker command for this session only."""
        join = self.manager.worker_join(run_id)
        return {"worker_join": {run_id: join.command}} if join is not None else {}

    def start_run(self, config: TrainConfig) -> RunState:
        """Start a validated config: it must fit this machine (trainer.config.preflight) before a run
        folder exists, and a runs folder the studio cannot write is a message, not a crash."""
        from trainer.config.preflight import check_run_fits

        check_run_fits(config)  # ConfigError naming num_envs / env_kwargs and the numbers
        try:
            return self.manager.start(config.to_dict())
        except OSError as error:
            raise RunError(f"Could not create a run folder in {self.manager.runs_dir}: "
                           f"{error.strerror or error}. Check that folder's permissions and free space.") from None

    def on_stop(self, run_id: str):
        """Ask the shown run to stop. The badge in the status line says "stopping" until it has;
        the message box is cleared rather than left saying "Stopping" after the run ended."""
        try:
            self.manager.stop(run_id)
        except RunError as error:
            return _message(error)
        gr.Info(f"Stopping {run_id}: the trainer saves a checkpoint and the model, then ends.")
        return ""

    def on_load_run_settings(self, run_id: str | None):
        """The shown run's settings into the form (every field), e.g. to start a variant of it."""
        run = self._snapshot(run_id)
        unchanged = [gr.skip()] * len(FORM_FIELDS)
        if run is None:
            return unchanged + ["**No run is shown yet:** start one, or open one from the Runs tab."]
        try:
            values = form_values(config_from_dict(run.config).to_dict())
        except USER_ERRORS as error:
            return unchanged + [_message(f"Run {run.run_id}'s settings do not fit the form: {error}")]
        return values + [f"The form holds the settings of **{run.run_id}**."]

    def on_load_yaml(self, text: str):
        """Pasted YAML -> the form (every field), with a note about keys the studio ignores."""
        try:
            config, notes = config_from_yaml_text(text)
        except USER_ERRORS as error:
            gr.Warning(str(error).splitlines()[0])
            return [gr.skip()] * len(FORM_FIELDS) + [_message(error)]
        message = "Loaded the YAML into the form." + "".join(f"\n\n{note}" for note in notes)
        return form_values(config) + [message]

    def on_upload_yaml(self, path: str | None):
        if not path:
            return gr.skip(), *[gr.skip()] * len(FORM_FIELDS), gr.skip()
        name = Path(path).name  # never the server path Gradio stored it under
        try:
            size = Path(path).stat().st_size
            if size > MAX_YAML_BYTES:  # checked before reading: a config is a few hundred bytes
                return gr.skip(), *[gr.skip()] * len(FORM_FIELDS), (
                    f"**{name} is too large ({size:_} bytes; a config is at most {MAX_YAML_BYTES:_}).**")
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return gr.skip(), *[gr.skip()] * len(FORM_FIELDS), f"**{name} is not a text (YAML) file.**"
        return (text, *self.on_load_yaml(text))

    def on_export_yaml(self, *values):
        try:
            config = validated_config(values, allow_custom_envs=True)
        except USER_ERRORS as error:
            return gr.skip(), gr.skip(), _message(error)
        text = yaml_from_config(config)
        name = f"{safe_name(str(config.env_name))}-{time.strftime('%Y%m%d-%H%M%S')}.yaml"
        path = atomic_write(self.scratch.file("exports", name), text)
        return text, gr.File(value=str(path), visible=True), "Exported the form as YAML (below, and as a file)."

    # ---- the Runs tab

    def runs_table(self, game: str | None, status: str | None, order: str | None):
        """The table (filtered by game and status, sorted) and the line saying how many it lists."""
        rows, note = self._table_rows(game, status, order)
        return views.runs_table(rows), note

    def _table_rows(self, game: str | None, status: str | None, order: str | None,
                    runs: Sequence[RunSnapshot] | None = None) -> tuple[list[list], str]:
        runs = self.manager.list_runs() if runs is None else runs
        shown = runs_tab.table_runs(runs, game, status, order)
        return views.runs_table_rows(shown), runs_tab.filter_note(len(shown), len(runs))

    def on_refresh_runs(self, selected: str | None, compared: list[str] | None, game: str | None = None,
                        status: str | None = None, order: str | None = None):
        """Every run in the runs folder, read again: runs started since (here, by another studio,
        by the CLI) appear, deleted ones go. Outputs: table, picker, compare, Evaluate's run
        picker, game filter, filter note."""
        runs = self.manager.list_runs()
        ids = [run.run_id for run in runs]
        selected = selected if selected in ids else (ids[0] if ids else None)
        compared = [run_id for run_id in (compared or []) if run_id in ids]
        games = runs_tab.game_filter_choices(runs)
        game = game if game in games else runs_tab.ALL
        rows, note = self._table_rows(game, status, order, runs)
        return (
            views.runs_table(rows),
            gr.Dropdown(choices=_run_choices(runs), value=selected),
            gr.CheckboxGroup(choices=_run_choices(runs), value=compared),
            gr.Dropdown(choices=runs_with_models(runs)),
            gr.Dropdown(choices=games, value=game),
            note,
        )

    def on_table_select(self, event: gr.SelectData):
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

    def show_selected(self, run_id: str | None, compared: list[str] | None, viewed: dict,
                      tab_shown: bool = True, *chart_controls):
        """The selected run with the ticked runs overlaid (also what a change of the chart's
        controls calls). Outputs: the run view, the Runs tab's timer (on while the tab shows a run
        that trains) and what this session has drawn."""
        updates, viewed, live = self._render_shown(run_id, compared, viewed, chart_controls)
        return (*updates, gr.Timer(active=tab_shown and live), viewed)

    def _render_shown(self, run_id: str | None, compared: list[str] | None, viewed: dict,
                      chart_controls: Sequence) -> tuple[list, dict, bool]:
        """render_run's updates for the shown runs, and whether one of them trains."""
        shown = self._shown_runs(run_id, compared)
        updates, viewed = self.render_run(shown[0] if shown else None, shown[1:], viewed, with_log=False,
                                          chart=ChartOptions.from_controls(*chart_controls))
        return updates, viewed, any(run.is_active for run in shown)

    def on_runs_tick(self, run_id: str | None, compared: list[str] | None, viewed: dict, tab_shown: bool,
                     game: str | None, status: str | None, order: str | None, *chart_controls):
        """Timer tick of the Runs tab: the shown runs' status line, charts and files (unchanged parts
        skipped), and every TABLE_SECONDS the table (its steps and states move too). The timer
        switches itself off once no shown run trains, or when the tab is not shown."""
        if not tab_shown:
            return (*[gr.skip()] * self._run_view_size(with_log=False), gr.skip(), gr.skip(),
                    gr.Timer(active=False), viewed)
        updates, viewed, live = self._render_shown(run_id, compared, viewed, chart_controls)
        rows = note = gr.skip()
        if time.time() - viewed.get("table_at", 0.0) >= TABLE_SECONDS:
            viewed["table_at"] = time.time()
            table, text = self._table_rows(game, status, order)
            if changed_value(viewed, "table", (table, text)):
                rows, note = views.runs_table(table), text
        return (*updates, rows, note, gr.skip() if live else gr.Timer(active=False), viewed)

    def _run_view_size(self, with_log: bool) -> int:
        """How many outputs render_run returns (status, charts, GIF and caption, log, files): counted
        from an empty render, so it follows the run view's parts."""
        return len(self.render_run(None, [], {}, with_log=with_log)[0])

    def on_compare_change(self, run_id: str | None, compared: list[str] | None):
        """The note above the config diff (a warning when the games differ) and the diff: only
        the keys in which the shown runs' configs differ."""
        shown = self._shown_runs(run_id, compared)
        headers, rows = runs_tab.config_diff(shown)
        return (runs_tab.compare_note(shown, len(rows)),
                gr.Dataframe(value={"headers": headers, "data": rows}, visible=bool(rows)))

    def run_notes_fields(self, run_id: str | None):
        """The name and notes boxes, filled from the selected run's notes.json."""
        run = self._snapshot(run_id)
        if run is None:
            return gr.Textbox(value="", interactive=False), gr.Textbox(value="", interactive=False)
        return gr.Textbox(value=run.name, interactive=True), gr.Textbox(value=run.notes, interactive=True)

    def on_save_notes(self, run_id: str | None, name: str | None, notes: str | None):
        try:
            run = self.manager.annotate(run_id or "", name, notes)
        except USER_ERRORS as error:
            return _message(error)
        if not run.name and not run.notes:
            return f"Cleared the name and notes of **{run.run_id}**."
        return f"Saved the name and notes of **{run.run_id}**" + (f" (now *{run.name}*)." if run.name else ".")

    def on_resume(self, run_id: str):
        try:
            state = self.manager.resume(run_id)
        except USER_ERRORS as error:
            return _message(error), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return (f"Resumed **{state.run_id}** from its last checkpoint.{self.join_note(state.run_id)}", state.run_id,
                gr.Timer(active=True), self.join_state(state.run_id), gr.Tabs(selected="train"))

    def on_open(self, run_id: str):
        if not self._snapshot(run_id):
            return "**Pick a run first.**", gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return "", run_id, gr.Timer(active=True), {}, gr.Tabs(selected="train")

    def on_stop_selected(self, run_id: str):
        return self.on_stop(run_id)

    def on_delete_request(self, run_id: str):
        """First click of Delete: a confirmation, unless the run still trains (the delete would be
        refused after the confirmation): then the message says to stop it first."""
        run = self._snapshot(run_id)
        if run is None:
            return "**Pick a run first.**", gr.Button(visible=False)
        refusal = runs_tab.delete_refusal(run)
        if refusal:
            return refusal, gr.Button(visible=False)
        return (f"Delete **{run.title}** and all its files? Click *Confirm delete*.",
                gr.Button(f"Confirm delete {run_id}", visible=True))

    def on_delete_confirm(self, run_id: str):
        try:
            self.manager.delete(run_id)
        except USER_ERRORS as error:
            return _message(error), gr.Button(visible=False)
        return f"Deleted **{run_id}**.", gr.Button(visible=False)

    # ---- the Evaluate tab

    def on_evaluate_tab(self, current: str | None):
        """Opening the Evaluate tab: the runs with a model, one of them picked (its final model
        then preselected by `model_files`), so Evaluate works at once."""
        from studio.evaluate import preselected_run

        runs = self.manager.list_runs()
        return gr.Dropdown(choices=runs_with_models(runs), value=preselected_run(runs, current))

    def model_files(self, run_id: str | None):
        run = self._snapshot(run_id)
        if run is None:
            return gr.Dropdown(choices=[], value=None)
        run_dir = Path(run.run_dir)
        checkpoints = list_checkpoints(checkpoint_folder(run_dir, run.config))  # honours checkpoint.path
        candidates = sorted(run_dir.glob("*.pth")) + [path for _, path in reversed(checkpoints)]
        names = [str(path.relative_to(run_dir)) for path in candidates
                 if path.is_relative_to(run_dir) and self._file(path)]
        return gr.Dropdown(choices=names, value=names[0] if names else None)

    def on_evaluate(self, source: str, run_id: str | None, file_name: str | None, upload: str | None,
                    episodes: float | None, deterministic: bool):
        from studio.evaluate import EvaluationError, evaluate_checkpoint

        try:
            if source == "upload":
                if not upload:
                    raise EvaluationError("Upload a .pth file first (or pick a run's model).")
                path = upload
            else:
                path = self._run_model_path(run_id, file_name)
            result = evaluate_checkpoint(path, episodes=episodes, deterministic=bool(deterministic),
                                         allow_custom_envs=self.allow_custom_envs,
                                         gif_path=self.scratch.file("evaluations", f"eval-{time.time_ns()}.gif"))
        except (EvaluationError, *USER_ERRORS) as error:
            text = hide_server_paths(str(error), upload)
            gr.Warning(text.splitlines()[0])
            return _message(text), gr.skip()
        evaluated = f"`{Path(upload).name}` (uploaded)" if source == "upload" else f"`{file_name}` of **{run_id}**"
        return f"{result.markdown()}\n\nModel file: {evaluated}.", result.gif_path

    def _run_model_path(self, run_id: str | None, file_name: str | None) -> str:
        from studio.evaluate import EvaluationError

        if not run_id or not file_name:
            raise EvaluationError("Pick a run and one of its model files first.")
        run_dir = self.manager.run_dir(run_id)
        path = self._file(run_dir / file_name)
        if path is None or not path.endswith(".pth"):
            raise EvaluationError(f"{file_name!r} is not a model file of run {run_id}.")
        return path

    # ---- page load

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

    # ---- API (gradio_client)

    def api_start(self, env_name: str = DEFAULT_ENV, settings: dict | None = None) -> dict:
        """Start a run: the env's tuned config (configs/<env>.yaml) with `settings` on top
        (any config keys, e.g. {"total_timesteps": 50000, "num_envs": 16}). Returns the run summary."""
        try:
            raw = merged_settings(tuned_config(env_name), settings or {})
            check_web_safety(raw, self.allow_custom_envs)
            state = self.start_run(config_from_dict(raw))
        except USER_ERRORS as error:
            raise user_error(error, "/start") from None
        summary = views.run_summary(state.snapshot())
        join = self.manager.worker_join(state.run_id)
        if join is not None:  # only the caller that started it hears the token
            summary["worker_join"] = {"master": join.master, "token": join.token, "command": join.command}
        return summary

    def api_poll(self, run_id: str) -> dict:
        """The run's status, step, speed, returns, last metrics, log tail and error (if any)."""
        try:
            return views.run_summary(self.manager.get(run_id))
        except RunError as error:
            raise user_error(error, "/poll") from None

    def api_stop(self, run_id: str) -> dict:
        """Ask the run to stop; it saves the model and ends. Poll until status is 'stopped'."""
        try:
            return views.run_summary(self.manager.stop(run_id).snapshot())
        except RunError as error:
            raise user_error(error, "/stop") from None

    def api_runs(self) -> list:
        """Every run in the runs folder (newest first): id, env, model, status, steps, returns."""
        runs = self.manager.list_runs()
        rows = views.runs_table_rows(runs)
        return [dict(zip(views.RUNS_TABLE_HEADERS, row), wall_seconds=round(run.wall_seconds, 2))
                for run, row in zip(runs, rows)]

    def api_download(self, run_id: str, kind: str) -> str:
        """One of the run's files: kind = model | checkpoint | config | metrics."""
        run = self._snapshot(run_id)
        if run is None:
            raise user_error(f"There is no run {str(run_id)[:80]!r}.", "/download")
        if kind not in DOWNLOAD_KINDS:
            raise user_error(f"kind must be one of {', '.join(DOWNLOAD_KINDS)}, got {str(kind)[:40]!r}.", "/download")
        path = self._run_files(run, write_csv=kind == "metrics")[kind]
        if path is None:
            raise user_error(f"Run {run_id} has no {kind} file yet.", "/download")
        return path


def env_fill_message(env_name: str) -> str:
    """What on_env_change filled the form with: the tuned config only where one ships, else which
    defaults (trainer.config.defaults.defaults_source says it for the CLI and the API alike)."""
    return f"Filled the form with {defaults_source(env_name)}."


def _run_choices(runs: Sequence[RunSnapshot]) -> list[tuple[str, str]]:
    """(label, run id) for the run pickers: a named run shows its name beside its id."""
    return [(f"{run.name} ({run.run_id})" if run.name else run.run_id, run.run_id) for run in runs]


def user_error(error: Exception | str, endpoint: str) -> gr.Error:
    """An API answer for a user's mistake: the message goes to the client, and the server's
    console gets one line for it, no traceback (it is not a bug; real bugs keep theirs)."""
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    LOG.warning("studio: API %s refused: %s", endpoint, first[:300])
    return gr.Error(text, print_exception=False)


def merged_settings(base: dict, settings: dict) -> dict:
    """`base` (a complete config) with the API's `settings` on top, by the config's one rule."""
    if not isinstance(settings, dict):
        raise FormError(f"settings must be a mapping of config keys to values, got {settings!r}"[:200])
    return merge_settings(base, settings)


def plot_data(figure: dict) -> PlotData:
    """A plotly-JSON figure dict, ready for gr.Plot without building a plotly Figure."""
    return PlotData(type="plotly", plot=json.dumps(figure))


def changed_value(viewed: dict, part: str, key: object) -> bool:
    """True (and remembered in `viewed`) when `key` differs from what this session last showed."""
    if viewed.get(part) == key:
        return False
    viewed[part] = key
    return True


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


def _message(error: Exception | str) -> str:
    text = str(error).strip()
    first, _, rest = text.partition("\n")
    return f"**{first}**" + (f"\n{rest}" if rest else "")
