"""The Evaluate tab: play a run's model file, or an uploaded .pth (loaded weights-only), for some
episodes and show the scores and a GIF (studio/evaluate.py does the playing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from studio.evaluate import runs_with_models
from studio.handlers import PRIVATE, USER_ERRORS, Handlers, bold_message
from studio.runs_tab import RunsEvents
from studio.scratch import hide_server_paths
from trainer.run.layout import checkpoint_folder, list_checkpoints


class EvaluateTab(Handlers):
    """The Evaluate tab's event functions."""

    def on_evaluate_tab(self, current: str | None, viewed: str | None = None):
        """Opening the Evaluate tab: the runs with a model, one of them picked (the run last
        viewed, see `preselected_run`; its final model then preselected by `model_files`), so
        Evaluate works at once."""
        from studio.evaluate import preselected_run

        runs = self.manager.list_runs()
        return gr.Dropdown(choices=runs_with_models(runs), value=preselected_run(runs, current, viewed))

    def model_files(self, run_id: str | None):
        """The picked run's model files: final models first, then its checkpoints, newest first."""
        run = self._snapshot(run_id)
        if run is None:
            return gr.Dropdown(choices=[], value=None)
        run_dir = Path(run.run_dir)
        checkpoints = list_checkpoints(checkpoint_folder(run_dir, run.config))  # honours checkpoint.path
        candidates = sorted(run_dir.glob("*.pth")) + [path for _, path in reversed(checkpoints)]
        names = [
            str(path.relative_to(run_dir)) for path in candidates if path.is_relative_to(run_dir) and self._file(path)
        ]
        return gr.Dropdown(choices=names, value=names[0] if names else None)

    def on_evaluate(
        self,
        source: str,
        run_id: str | None,
        file_name: str | None,
        upload: str | None,
        episodes: float | None,
        deterministic: bool,
    ):
        """Play `episodes` episodes with the picked or uploaded model: the scores and a GIF."""
        from studio.evaluate import EvaluationError, evaluate_checkpoint

        try:
            if source == "upload":
                if not upload:
                    raise EvaluationError("Upload a .pth file first (or pick a run's model).")
                path = upload
            else:
                path = self._run_model_path(run_id, file_name)
            result = evaluate_checkpoint(
                path,
                episodes=episodes,
                deterministic=bool(deterministic),
                allow_custom_envs=self.allow_custom_envs,
                gif_path=self.scratch.file("evaluations", f"eval-{time.time_ns()}.gif"),
            )
        except (EvaluationError, *USER_ERRORS) as error:
            text = hide_server_paths(str(error), upload)
            gr.Warning(text.splitlines()[0])
            return bold_message(text), gr.skip()
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


# ----------------------------------------------------------------------------- components


@dataclass
class EvaluatePanel:
    """The Evaluate tab's components."""

    tab: gr.Tab
    source: gr.Radio
    run: gr.Dropdown
    file: gr.Dropdown
    upload: gr.File
    episodes: gr.Number
    deterministic: gr.Checkbox
    button: gr.Button
    message: gr.Markdown
    gif: gr.Image


def build_evaluate_tab() -> EvaluatePanel:
    """The Evaluate tab's layout: what to play on the left, the result on the right."""
    with gr.Tab("Evaluate", id="evaluate") as tab:
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=330):
                source = gr.Radio(
                    [("A run's model", "run"), ("Upload a .pth", "upload")],
                    value="run",
                    label="Model",
                    elem_id="eval-source",
                )
                run = gr.Dropdown([], label="Run", elem_id="eval-run")
                file = gr.Dropdown([], label="Model file", elem_id="eval-file")
                upload = gr.File(
                    label="Upload a .pth (loaded weights-only: nothing in it runs)",
                    file_types=[".pth", ".pt"],
                    elem_id="eval-upload",
                )
                episodes = gr.Number(10, label="episodes", precision=0, elem_id="eval-episodes")
                deterministic = gr.Checkbox(True, label="deterministic (always the most likely action)")
                button = gr.Button("Evaluate", variant="primary", elem_id="evaluate")
            with gr.Column(scale=2):
                message = gr.Markdown(elem_id="eval-message")
                gif = gr.Image(
                    label="The agent playing",
                    show_label=False,
                    type="filepath",
                    interactive=False,
                    height=380,
                    elem_id="eval-gif",
                )
    return EvaluatePanel(tab, source, run, file, upload, episodes, deterministic, button, message, gif)


def wire_evaluate_tab(handlers: EvaluateTab, panel: EvaluatePanel, runs: RunsEvents) -> None:
    """The Evaluate tab's events; opening it stops the Runs tab's timer and reads the runs again."""
    p = panel
    p.tab.select(**runs.hide, **PRIVATE).then(**runs.refresh, **PRIVATE).then(
        handlers.on_evaluate_tab, [p.run, runs.last_viewed], p.run, **PRIVATE
    )  # the run last viewed and its final model picked
    p.run.change(handlers.model_files, p.run, p.file, **PRIVATE)
    p.run.input(lambda: "run", None, p.source, **PRIVATE)
    p.run.input(lambda run_id: run_id or gr.skip(), p.run, runs.last_viewed, **PRIVATE)  # picked here: kept
    p.upload.upload(lambda: "upload", None, p.source, **PRIVATE)
    p.button.click(
        handlers.on_evaluate,
        [p.source, p.run, p.file, p.upload, p.episodes, p.deterministic],
        [p.message, p.gif],
        **PRIVATE,
    )
