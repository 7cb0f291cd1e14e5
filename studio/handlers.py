"""What every tab's event handlers share: the RunManager and the studio's options, finding a run,
the run files the page may serve, and starting and stopping runs.

Each tab's handlers (studio/train_tab.py, runs_tab.py, evaluate_tab.py, http_api.py) subclass
`Handlers`; studio/callbacks.py joins them into the one `Studio` a page wires.
"""

from __future__ import annotations

import os

import gradio as gr

from studio import views
from studio.form import ConfigError, FormError
from studio.runs import RunError, RunManager, RunSnapshot, RunState, safe_run_file
from studio.scratch import ScratchFolder
from studio.system import SystemMonitor
from trainer.config.keys import TrainConfig
from trainer.run.layout import config_path, metrics_csv_path

DEFAULT_ENV = "flappy_bird"  # the game a new page (and /start without one) trains: the guides', with its tuned config
DOWNLOAD_KINDS = ("model", "checkpoint", "config", "metrics")
USER_ERRORS = (FormError, ConfigError, RunError)
PRIVATE = {"api_visibility": "private"}  # the page's own events: not on the API page, not for gradio_client


class Handlers:
    """The state the page's event functions share: the RunManager (and a usage sampler)."""

    def __init__(
        self,
        manager: RunManager,
        allow_custom_envs: bool = False,
        monitor: SystemMonitor | None = None,
        poll_seconds: float = 1.0,
        chart_seconds: float = 2.0,
        scratch: ScratchFolder | None = None,
    ):
        self.manager = manager
        self.allow_custom_envs = allow_custom_envs
        self.monitor = monitor or SystemMonitor()
        self.poll_seconds = poll_seconds
        self.chart_seconds = chart_seconds
        # Exported YAML, evaluation GIFs, ONNX files (and, launched, Gradio's uploads) are the
        # studio's own, not a run's: one temp folder for this studio, removed when it exits.
        self.scratch = scratch or ScratchFolder()

    # ---- finding a run and its files

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
        """The run's file of each DOWNLOAD_KINDS (None where it has none yet); `write_csv`: write
        metrics.csv from the run's history first."""
        csv_path = None
        if write_csv and run.update_count:
            csv_path = views.write_metrics_csv(run)
        elif metrics_csv_path(run.run_dir).exists():
            csv_path = str(metrics_csv_path(run.run_dir))
        return {
            "model": self._file(run.final_model),
            "checkpoint": self._file(run.latest_checkpoint),
            "config": self._file(config_path(run.run_dir)),
            "metrics": self._file(csv_path),
        }

    # ---- starting and stopping

    def start_run(self, config: TrainConfig) -> RunState:
        """Start a validated config: it must fit this machine (trainer.config.preflight) before a run
        folder exists, and a runs folder the studio cannot write is a message, not a crash."""
        from trainer.config.preflight import check_run_fits

        check_run_fits(config)  # ConfigError naming num_envs / env_kwargs and the numbers
        try:
            return self.manager.start(config.to_dict())
        except OSError as error:
            raise RunError(
                f"Could not create a run folder in {self.manager.runs_dir}: "
                f"{error.strerror or error}. Check that folder's permissions and free space."
            ) from None

    def join_note(self, run_id: str) -> str:
        """For the page that started a run that accepts workers: where it listens and the worker
        command with the token (said nowhere else: not in the log, the Runs tab or /poll)."""
        join = self.manager.worker_join(run_id)
        if join is None:
            return ""
        note = (
            f"\n\nIt accepts workers on `{join.master}`: on each worker machine run\n\n"
            f"    {join.command}\n\n(the token is shown only on this page)."
        )
        if join.master.startswith(("127.", "localhost", "[::1]", "::1")):
            note += (
                " The master listens on this machine only; start the studio with `--cluster-host ADDRESS` "
                "to let other machines join."
            )
        return note

    def join_state(self, run_id: str) -> dict:
        """A fresh `viewed` state that remembers the worker command for this session only."""
        join = self.manager.worker_join(run_id)
        return {"worker_join": {run_id: join.command}} if join is not None else {}

    def on_stop(self, run_id: str):
        """Ask the shown run to stop. The badge in the status line says "stopping" until it has;
        the message box is cleared rather than left saying "Stopping" after the run ended."""
        try:
            self.manager.stop(run_id)
        except RunError as error:
            return bold_message(error)
        gr.Info(f"Stopping {run_id}: the trainer saves a checkpoint and the model, then ends.")
        return ""


def changed_value(viewed: dict, part: str, key: object) -> bool:
    """True (and remembered in `viewed`) when `key` differs from what this session last showed."""
    if viewed.get(part) == key:
        return False
    viewed[part] = key
    return True


def bold_message(error: Exception | str) -> str:
    """An error for a message box: its first line in bold, the rest as it is."""
    text = views.markdown_text(str(error).strip())  # shown as written: a `*name` is no emphasis
    first, _, rest = text.partition("\n")
    return f"**{first}**" + (f"\n{rest}" if rest else "")
