"""The studio's HTTP API for `gradio_client` (documented in docs/studio.md), beside the page:

  /start(env_name, settings) -> run summary     /poll(run_id) -> run summary
  /stop(run_id) -> run summary                   /download(run_id, kind) -> file
  /runs() -> one row per run

A user's mistake answers a `gr.Error` with the message and logs one line, no traceback.
"""

from __future__ import annotations

import logging

import gradio as gr

from studio import views
from studio.form import FormError, check_web_safety, tuned_config
from studio.handlers import DEFAULT_ENV, DOWNLOAD_KINDS, USER_ERRORS, Handlers
from studio.runs import RunError
from trainer.config.loading import merge_settings
from trainer.config.validation import config_from_dict

LOG = logging.getLogger("studio")


class HttpApi(Handlers):
    """The API's endpoints, each a plain function of JSON-able values."""

    def api_start(self, env_name: str = DEFAULT_ENV, settings: dict | None = None) -> dict:
        """Start a run: the env's tuned config for the algorithm `settings` names (configs/<env>.yaml
        for ppo, configs/cartpole_dqn.yaml, ...) with `settings` on top
        (any config keys, e.g. {"total_timesteps": 50000, "num_envs": 16}). Returns the run summary."""
        try:
            algo = (settings or {}).get("algo", "ppo") if isinstance(settings, dict) else "ppo"
            raw = merged_settings(tuned_config(env_name, str(algo)), settings or {})
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
        return [
            dict(zip(views.RUNS_TABLE_HEADERS, row), wall_seconds=round(run.wall_seconds, 2))
            for run, row in zip(runs, rows)
        ]

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


def register_api(api: HttpApi) -> None:
    """The endpoints, inside the page's Blocks: /download answers a file, so it is a hidden button's
    event (gr.api's functions answer JSON)."""
    gr.api(api.api_start, api_name="start")
    gr.api(api.api_poll, api_name="poll")
    gr.api(api.api_stop, api_name="stop")
    gr.api(api.api_runs, api_name="runs")
    download_run = gr.Textbox(visible=False)
    download_kind = gr.Textbox(visible=False)
    download_file = gr.File(visible=False)
    download_trigger = gr.Button(visible=False)
    download_trigger.click(api.api_download, [download_run, download_kind], download_file, api_name="download")
