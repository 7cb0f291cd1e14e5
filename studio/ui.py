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

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import gradio as gr
from gradio.components.plot import PlotData

from studio import views
from studio.charts import CurveSource, diagnostics_figure, reward_figure, system_figure
from studio.form import (
    BASIC_FIELDS,
    FORM_FIELDS,
    ConfigError,
    FormError,
    FormField,
    check_web_safety,
    config_from_yaml_text,
    advanced_groups,
    form_values,
    tuned_config,
    validated_config,
    yaml_from_config,
)
from trainer.config import config_from_dict, merge_settings
from studio.runs import RunError, RunManager, RunSnapshot, safe_run_file
from trainer.run_dir import checkpoint_folder, config_path, list_checkpoints
from studio.system import SystemMonitor, available_devices

DEFAULT_ENV = "cartpole"
FILES_SECONDS = 15.0  # while a run trains, refresh its download buttons at most this often
DOWNLOAD_KINDS = ("model", "checkpoint", "config", "metrics")
USER_ERRORS = (FormError, ConfigError, RunError)
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
.log-box {height: 340px; overflow-y: auto; display: flex; flex-direction: column-reverse;
  border: 1px solid var(--border-color-primary); border-radius: 8px; background: var(--block-background-fill)}
.log-box pre {margin: 0; padding: 8px 10px; font-family: var(--font-mono); font-size: 0.78em;
  white-space: pre-wrap; word-break: break-word}
.log-title {font-weight: 600; font-size: 0.9em; margin-bottom: 4px}
.field-group-title p {margin: 10px 0 0 0; font-size: 0.95em}
"""


# ----------------------------------------------------------------------------- components


@dataclass
class RunView:
    """The components that show one run (and, in the Runs tab, others overlaid on its charts)."""

    status: gr.HTML
    reward_plot: gr.Plot
    diagnostics_plot: gr.Plot
    gif: gr.Image
    log: gr.HTML | None
    downloads: list[gr.DownloadButton]

    @property
    def outputs(self) -> list:
        shown = [self.status, self.reward_plot, self.gif]
        shown += [self.log] if self.log is not None else []
        return shown + [self.diagnostics_plot, *self.downloads]


def _build_run_view(prefix: str, with_log: bool) -> RunView:
    status = gr.HTML(views.status_html(None), elem_id=f"{prefix}status")
    reward_plot = gr.Plot(_plot(reward_figure([])), show_label=False, elem_id=f"{prefix}reward-plot")
    with gr.Row(equal_height=False):
        gif = gr.Image(
            label=views.gif_caption(None), type="filepath", interactive=False, height=330,
            elem_id=f"{prefix}rollout-gif", buttons=["download"],
        )
        log = None
        if with_log:
            log = gr.HTML(views.log_html(""), label="Training log", elem_id=f"{prefix}train-log")
    diagnostics_plot = gr.Plot(_plot(diagnostics_figure([])), show_label=False, elem_id=f"{prefix}diagnostics-plot")
    with gr.Row():
        downloads = [
            gr.DownloadButton("Final model (.pth)", interactive=False, variant="primary", elem_id=f"{prefix}download-model"),
            gr.DownloadButton("Latest checkpoint", interactive=False, elem_id=f"{prefix}download-checkpoint"),
            gr.DownloadButton("config.yaml", interactive=False, elem_id=f"{prefix}download-config"),
            gr.DownloadButton("metrics.csv", interactive=False, elem_id=f"{prefix}download-metrics"),
        ]
    return RunView(status, reward_plot, diagnostics_plot, gif, log, downloads)


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


# ----------------------------------------------------------------------------- the studio


class Studio:
    """The page's event functions. Shared state: the RunManager (and a usage sampler)."""

    def __init__(self, manager: RunManager, allow_custom_envs: bool = False,
                 monitor: SystemMonitor | None = None, poll_seconds: float = 1.0, chart_seconds: float = 2.0):
        self.manager = manager
        self.allow_custom_envs = allow_custom_envs
        self.monitor = monitor or SystemMonitor()
        self.poll_seconds = poll_seconds
        self.chart_seconds = chart_seconds
        # Evaluation GIFs are the studio's own output, not a run's: they go to a temp folder.
        self.evaluation_dir = Path(tempfile.mkdtemp(prefix="rl-studio-evaluations-"))

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
        if write_csv and run.metrics:
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
                   with_log: bool) -> tuple[list, dict]:
        """Updates for a RunView's outputs; unchanged parts are gr.skip()."""
        viewed = dict(viewed or {})

        def changed(part: str, key: object) -> bool:
            return changed_value(viewed, part, key)

        if run is None:
            updates = [views.status_html(None)]
            empty = changed("charts", None)
            updates += [_plot(reward_figure([])) if empty else gr.skip()]
            updates += [gr.Image(value=None, label=views.gif_caption(None)) if changed("gif", None) else gr.skip()]
            updates += [(views.log_html("") if changed("log", None) else gr.skip())] if with_log else []
            updates += [_plot(diagnostics_figure([])) if empty else gr.skip()]
            updates += [gr.DownloadButton(value=None, interactive=False) if changed(f"file-{kind}", None) else gr.skip()
                        for kind in DOWNLOAD_KINDS]
            return updates, viewed

        sources = [run] + [other for other in overlays if other.run_id != run.run_id]
        chart_key = tuple((source.run_id, len(source.metrics), source.status) for source in sources)
        curves = [CurveSource(source.run_id, source.metrics) for source in sources]
        # Redrawing plotly charts costs the browser more than anything else on the page: at most
        # every `chart_seconds` while the run trains, and once more when it ends.
        due = not run.is_active or time.time() - viewed.get("charts_at", 0.0) >= self.chart_seconds
        charts_changed = due and changed("charts", chart_key)
        if charts_changed:
            viewed["charts_at"] = time.time()
        updates: list = [views.status_html(run)]
        updates.append(_plot(reward_figure(curves)) if charts_changed else gr.skip())

        gif = run.latest_gif
        gif_path = self._file(gif.path) if gif else None
        if changed("gif", (run.run_id, gif_path)):
            updates.append(gr.Image(value=gif_path, label=views.gif_caption(gif if gif_path else None)))
        else:
            updates.append(gr.skip())
        if with_log:  # re-rendering the log box is the next cost: at the charts' pace too
            log_due = not run.is_active or time.time() - viewed.get("log_at", 0.0) >= self.chart_seconds
            log_changed = log_due and changed("log", views.log_identity(run))
            if log_changed:
                viewed["log_at"] = time.time()
            updates.append(views.log_html(views.log_text(run)) if log_changed else gr.skip())
        updates.append(_plot(diagnostics_figure(curves)) if charts_changed else gr.skip())

        # Each changed file handed to a download button is copied into Gradio's cache: while the
        # run trains, refresh them at most every FILES_SECONDS; at the end, at once.
        files_due = not run.is_active or time.time() - viewed.get("files_at", 0.0) >= FILES_SECONDS
        if not files_due:
            return updates + [gr.skip()] * len(DOWNLOAD_KINDS), viewed
        viewed["files_at"] = time.time()
        files = self._run_files(run, write_csv=changed("csv", (run.run_id, len(run.metrics), run.is_active)))
        for kind in DOWNLOAD_KINDS:
            path = files[kind]
            key = (path, _file_identity(path))
            if changed(f"file-{kind}", key):
                updates.append(gr.DownloadButton(value=path, interactive=path is not None))
            else:
                updates.append(gr.skip())
        return updates, viewed

    def on_tick(self, run_id: str, viewed: dict):
        """Timer tick of the live view: the run's state, charts, GIF, log, files, machine load."""
        run = self._snapshot(run_id)
        updates, viewed = self.render_run(run, [], viewed, with_log=True)
        active = run is not None and run.is_active
        can_stop = active and run.status != "stopping"
        stop_button = gr.Button(interactive=can_stop) if changed_value(viewed, "can_stop", can_stop) else gr.skip()
        samples = self.monitor.sample()  # a new reading at most every few seconds, shared by all tabs
        new_sample = bool(samples) and changed_value(viewed, "usage_at", samples[-1].time)
        usage = _plot(system_figure(samples)) if new_sample else gr.skip()
        timer = gr.skip() if active else gr.Timer(active=False)
        return (*updates, usage, stop_button, timer, viewed)

    # ---- the form

    def on_env_change(self, env_name: str):
        """Fill the form from the env's tuned config (configs/<env>.yaml) when the env changes."""
        try:
            config = tuned_config(env_name)
        except USER_ERRORS:
            return [gr.skip()] * len(FORM_FIELDS) + [gr.skip()]
        values = form_values(config)
        keep = {"env_name", "device"}
        updates = [gr.skip() if form_field.key in keep else value for form_field, value in zip(FORM_FIELDS, values)]
        return updates + [f"Filled the form with the tuned settings for **{env_name}**."]

    def on_start(self, *values):
        """Validate the form and start a run. Returns message, run id, timer, viewed."""
        try:
            config = validated_config(values, self.allow_custom_envs)
            state = self.manager.start(config.to_dict())
        except USER_ERRORS as error:
            gr.Warning(str(error).splitlines()[0])
            return _message(error), gr.skip(), gr.skip(), gr.skip()
        return (f"Started **{state.run_id}**.", state.run_id, gr.Timer(active=True), {})

    def on_stop(self, run_id: str):
        try:
            self.manager.stop(run_id)
        except RunError as error:
            return _message(error)
        return f"Stopping **{run_id}**: the trainer saves a checkpoint and the model, then ends."

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
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return gr.skip(), *[gr.skip()] * len(FORM_FIELDS), "**That file is not a text (YAML) file.**"
        return (text, *self.on_load_yaml(text))

    def on_export_yaml(self, *values):
        try:
            config = validated_config(values, allow_custom_envs=True)
        except USER_ERRORS as error:
            return gr.skip(), gr.skip(), _message(error)
        text = yaml_from_config(config)
        export_dir = Path(tempfile.mkdtemp(prefix="rl-studio-export-"))
        path = export_dir / f"{Path(str(config.env_name).replace(':', '_')).name}.yaml"
        path.write_text(text, encoding="utf-8")
        return text, gr.File(value=str(path), visible=True), "Exported the form as YAML (below, and as a file)."

    # ---- the Runs tab

    def run_choices(self) -> list[str]:
        return [run.run_id for run in self.manager.list_runs()]

    def on_refresh_runs(self, selected: str | None, compared: list[str] | None):
        runs = self.manager.list_runs()
        ids = [run.run_id for run in runs]
        selected = selected if selected in ids else (ids[0] if ids else None)
        compared = [run_id for run_id in (compared or []) if run_id in ids]
        return (
            views.runs_table_rows(runs),
            gr.Dropdown(choices=ids, value=selected),
            gr.CheckboxGroup(choices=ids, value=compared),
            gr.Dropdown(choices=[run.run_id for run in runs if run.final_model or run.latest_checkpoint]),
        )

    def on_table_select(self, event: gr.SelectData):
        row = event.row_value or []
        return row[0] if row else gr.skip()

    def show_selected(self, run_id: str | None, compared: list[str] | None, viewed: dict):
        run = self._snapshot(run_id)
        overlays = [snapshot for snapshot in map(self._snapshot, compared or []) if snapshot is not None]
        if run is None and overlays:
            run, overlays = overlays[0], overlays[1:]
        updates, viewed = self.render_run(run, overlays, viewed, with_log=False)
        return (*updates, viewed)

    def on_resume(self, run_id: str):
        try:
            state = self.manager.resume(run_id)
        except USER_ERRORS as error:
            return _message(error), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return (f"Resumed **{state.run_id}** from its last checkpoint.", state.run_id,
                gr.Timer(active=True), {}, gr.Tabs(selected="train"))

    def on_open(self, run_id: str):
        if not self._snapshot(run_id):
            return "**Pick a run first.**", gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return "", run_id, gr.Timer(active=True), {}, gr.Tabs(selected="train")

    def on_stop_selected(self, run_id: str):
        return self.on_stop(run_id)

    def on_delete_request(self, run_id: str):
        run = self._snapshot(run_id)
        if run is None:
            return "**Pick a run first.**", gr.Button(visible=False)
        return (f"Delete **{run_id}** and all its files? Click *Confirm delete*.",
                gr.Button(f"Confirm delete {run_id}", visible=True))

    def on_delete_confirm(self, run_id: str):
        try:
            self.manager.delete(run_id)
        except USER_ERRORS as error:
            return _message(error), gr.Button(visible=False)
        return f"Deleted **{run_id}**.", gr.Button(visible=False)

    # ---- the Evaluate tab

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
                                         allow_custom_envs=self.allow_custom_envs, gif_dir=self.evaluation_dir)
        except (EvaluationError, *USER_ERRORS) as error:
            gr.Warning(str(error).splitlines()[0])
            return _message(error), gr.skip()
        return result.markdown(), result.gif_path

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

    def on_load(self):
        """A new tab shows the newest running run (else the newest run), e.g. after a reopen."""
        runs = self.manager.list_runs()
        active = [run for run in runs if run.is_active]
        shown = active[0] if active else (runs[0] if runs else None)
        if shown is None:
            return gr.skip(), gr.skip()
        return shown.run_id, gr.Timer(active=True)

    # ---- API (gradio_client)

    def api_start(self, env_name: str = DEFAULT_ENV, settings: dict | None = None) -> dict:
        """Start a run: the env's tuned config (configs/<env>.yaml) with `settings` on top
        (any config keys, e.g. {"total_timesteps": 50000, "num_envs": 16}). Returns the run summary."""
        try:
            raw = merged_settings(tuned_config(env_name), settings or {})
            check_web_safety(raw, self.allow_custom_envs)
            state = self.manager.start(config_from_dict(raw).to_dict())
        except USER_ERRORS as error:
            raise gr.Error(str(error)) from None
        return views.run_summary(state.snapshot())

    def api_poll(self, run_id: str) -> dict:
        """The run's status, step, speed, returns, last metrics, log tail and error (if any)."""
        try:
            return views.run_summary(self.manager.get(run_id))
        except RunError as error:
            raise gr.Error(str(error)) from None

    def api_stop(self, run_id: str) -> dict:
        """Ask the run to stop; it saves the model and ends. Poll until status is 'stopped'."""
        try:
            return views.run_summary(self.manager.stop(run_id).snapshot())
        except RunError as error:
            raise gr.Error(str(error)) from None

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
            raise gr.Error(f"There is no run {run_id!r}.")
        if kind not in DOWNLOAD_KINDS:
            raise gr.Error(f"kind must be one of {', '.join(DOWNLOAD_KINDS)}, got {kind!r}.")
        path = self._run_files(run, write_csv=kind == "metrics")[kind]
        if path is None:
            raise gr.Error(f"Run {run_id} has no {kind} file yet.")
        return path


def merged_settings(base: dict, settings: dict) -> dict:
    """`base` (a complete config) with the API's `settings` on top, by the config's one rule."""
    if not isinstance(settings, dict):
        raise FormError(f"settings must be a mapping of config keys to values, got {settings!r}"[:200])
    return merge_settings(base, settings)


def _plot(figure: dict) -> PlotData:
    """A plotly-JSON figure dict, ready for gr.Plot without building a plotly Figure."""
    return PlotData(type="plotly", plot=json.dumps(figure))


def changed_value(viewed: dict, part: str, key: object) -> bool:
    """True (and remembered in `viewed`) when `key` differs from what this session last showed."""
    if viewed.get(part) == key:
        return False
    viewed[part] = key
    return True


def _file_identity(path: str | None) -> tuple | None:
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def _message(error: Exception) -> str:
    text = str(error).strip()
    first, _, rest = text.partition("\n")
    return f"**{first}**" + (f"\n{rest}" if rest else "")


# ----------------------------------------------------------------------------- the page


def build_app(manager: RunManager, allow_custom_envs: bool = False, poll_seconds: float = 1.0,
              monitor: SystemMonitor | None = None) -> gr.Blocks:
    studio = Studio(manager, allow_custom_envs, monitor, poll_seconds)
    defaults = tuned_config(DEFAULT_ENV)
    default_values = dict(zip((f.key for f in FORM_FIELDS), form_values(defaults)))
    devices = available_devices()
    from envs import builtin_env_names

    env_choices = builtin_env_names()
    private = dict(api_visibility="private")

    with gr.Blocks(title="RL Studio", delete_cache=(600, 3600)) as demo:
        live_viewed = gr.State({}, time_to_live=SESSION_SECONDS)
        runs_viewed = gr.State({}, time_to_live=SESSION_SECONDS)
        gr.Markdown(
            "# RL Studio\nTrain a game-playing agent with PPO: pick a game and a model, press "
            "**Start**, watch it learn, download the trained model.",
            elem_id="studio-title",
        )
        with gr.Tabs(selected="train") as tabs:
            # ------------------------------------------------------------------ Train
            with gr.Tab("Train", id="train"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=2, min_width=340):
                        controls: dict[str, Any] = {}
                        for form_field in BASIC_FIELDS:
                            controls[form_field.key] = _form_component(
                                form_field, default_values[form_field.key], devices, env_choices)
                        with gr.Row():
                            start_button = gr.Button("Start", variant="primary", elem_id="start")
                            stop_button = gr.Button("Stop", variant="stop", interactive=False, elem_id="stop")
                        train_message = gr.Markdown(elem_id="train-message")
                        with gr.Accordion("Advanced", open=False, elem_id="advanced"):
                            batch_info = gr.Markdown(views.batch_note(
                                default_values["num_envs"], default_values["num_steps"],
                                default_values["mini_batch_size"]))
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
                        live = _build_run_view("", with_log=True)
                        system_plot = gr.Plot(_plot(system_figure([])), show_label=False, elem_id="system-plot")
            # ------------------------------------------------------------------ Runs
            with gr.Tab("Runs", id="runs") as runs_tab:
                with gr.Row():
                    refresh_button = gr.Button("Refresh", size="sm", scale=0, min_width=100)
                    gr.Markdown("Every run in the runs folder. Click a row to select it; tick runs to "
                                "compare their curves.")
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
                runs_message = gr.Markdown(elem_id="runs-message")
                compare_box = gr.CheckboxGroup([], label="Compare (overlay curves)", elem_id="compare")
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
                        eval_gif = gr.Image(label="The agent playing", type="filepath", interactive=False,
                                            height=380, elem_id="eval-gif")

        timer = gr.Timer(poll_seconds, active=False)
        form_inputs = [controls[form_field.key] for form_field in FORM_FIELDS]

        # ---- live view
        live_outputs = [*live.outputs, system_plot, stop_button, timer, live_viewed]
        timer.tick(studio.on_tick, [run_box, live_viewed], live_outputs, show_progress="hidden",
                   **private)
        start_button.click(studio.on_start, form_inputs, [train_message, run_box, timer, live_viewed],
                           **private)
        stop_button.click(studio.on_stop, run_box, train_message, **private)
        demo.load(studio.on_load, None, [run_box, timer], **private)

        # ---- form
        controls["env_name"].input(studio.on_env_change, controls["env_name"], [*form_inputs, train_message],
                                   **private)
        for key in ("num_envs", "num_steps", "mini_batch_size"):
            controls[key].change(views.batch_note, [controls["num_envs"], controls["num_steps"],
                                                    controls["mini_batch_size"]], batch_info, **private)
        load_yaml_button.click(studio.on_load_yaml, yaml_box, [*form_inputs, train_message], **private)
        upload_yaml_button.upload(studio.on_upload_yaml, upload_yaml_button,
                                  [yaml_box, *form_inputs, train_message], **private)
        export_yaml_button.click(studio.on_export_yaml, form_inputs, [yaml_box, export_file, train_message],
                                 **private)

        # ---- Runs tab
        refresh_outputs = [runs_table, run_picker, compare_box, eval_run]
        for trigger in (runs_tab.select, refresh_button.click, evaluate_tab.select):
            trigger(studio.on_refresh_runs, [run_picker, compare_box], refresh_outputs, **private)
        runs_table.select(studio.on_table_select, None, run_picker, **private)
        history_outputs = [*history.outputs, runs_viewed]
        for trigger in (run_picker.change, compare_box.change):
            trigger(studio.show_selected, [run_picker, compare_box, runs_viewed], history_outputs, **private)
        open_button.click(studio.on_open, run_picker, [runs_message, run_box, timer, live_viewed, tabs], **private)
        resume_button.click(studio.on_resume, run_picker, [runs_message, run_box, timer, live_viewed, tabs],
                            **private)
        stop_selected_button.click(studio.on_stop_selected, run_picker, runs_message, **private)
        delete_button.click(studio.on_delete_request, run_picker, [runs_message, confirm_delete_button], **private)
        confirm_delete_button.click(studio.on_delete_confirm, run_picker, [runs_message, confirm_delete_button],
                                    **private).then(
            studio.on_refresh_runs, [run_picker, compare_box], refresh_outputs, **private)

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
                   max_upload_size: str) -> dict:
    """Blocks.launch keywords: files served only from the runs folder, bounded session state,
    failed logins throttled per client address."""
    from starlette.middleware import Middleware

    from studio.throttle import LoginThrottle

    return dict(server_name=host, server_port=port, auth=auth, css=CSS, theme=gr.themes.Soft(),
                allowed_paths=allowed_paths, max_file_size=max_upload_size, footer_links=["api"],
                show_error=False, state_session_capacity=SESSION_CAPACITY,
                app_kwargs={"middleware": [Middleware(LoginThrottle)]})


def launch(host: str = "127.0.0.1", port: int = 7860, runs_dir: str = "runs",
           auth: tuple[str, str] | None = None, max_concurrent_runs: int = 2,
           allow_custom_envs: bool = False, poll_seconds: float = 1.0, max_upload_size: str = "200mb") -> None:
    """Build the studio and serve it until Ctrl-C; running trainers are then stopped (saving models)."""
    manager = RunManager(runs_dir, max_concurrent_runs=max_concurrent_runs)
    demo = build_app(manager, allow_custom_envs=allow_custom_envs, poll_seconds=poll_seconds)
    demo.queue(default_concurrency_limit=4)
    try:
        demo.launch(**launch_options(host, port, auth, [str(manager.runs_dir)], max_upload_size))
    finally:
        manager.shutdown()
