"""`python app.py` as a server: the gradio_client API, file-serving limits, bad input, restart.

Runs the real trainer on CartPole with a small budget.
"""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from gradio_client import Client
from gradio_client.exceptions import AuthenticationError

from test_studio_helpers import http_status, start_studio

QUICK_RUN = {"total_timesteps": 40_000, "gif_interval": 0, "checkpoint.interval": 5}


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    folder = tmp_path_factory.mktemp("studio")
    server = start_studio(folder / "runs", folder / "studio.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(studio, tmp_path_factory):
    return Client(studio.url, verbose=False, download_files=str(tmp_path_factory.mktemp("downloads")))


def poll_until(client: Client, run_id: str, statuses: tuple[str, ...], timeout: float = 180.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        summary = client.predict(run_id, api_name="/poll")
        if summary["status"] in statuses:
            return summary
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not reach {statuses}: {summary}")


@pytest.fixture(scope="module")
def finished_run(client) -> dict:
    started = client.predict("cartpole", QUICK_RUN, api_name="/start")
    assert started["status"] in ("starting", "running") and started["env_name"] == "cartpole"
    return poll_until(client, started["run_id"], ("finished", "failed"))


def test_client_starts_polls_and_downloads_a_model_that_plays(finished_run, client):
    from trainer import load_model

    assert finished_run["status"] == "finished", finished_run["error"]
    assert finished_run["step"] >= QUICK_RUN["total_timesteps"] and finished_run["updates"] > 0
    assert finished_run["final_model"] == "cartpole_ppo_final.pth"
    model_path = client.predict(finished_run["run_id"], "model", api_name="/download")
    model = load_model(model_path)
    probe = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    actions, _ = model.predict(probe, deterministic=True)
    assert actions.shape == (32,) and model.global_step == finished_run["step"]  # the run's own final model
    csv_path = client.predict(finished_run["run_id"], "metrics", api_name="/download")
    assert Path(csv_path).read_text().count("\n") == finished_run["updates"] + 1


def test_client_stops_a_run_and_the_model_is_saved(client):
    started = client.predict("cartpole", {"total_timesteps": 50_000_000}, api_name="/start")
    run_id = started["run_id"]
    deadline = time.time() + 120
    while client.predict(run_id, api_name="/poll")["updates"] < 2:
        assert time.time() < deadline, "the run made no progress"
        time.sleep(0.5)
    assert client.predict(run_id, api_name="/stop")["status"] == "stopping"
    stopped = poll_until(client, run_id, ("stopped", "failed"))
    assert stopped["status"] == "stopped", stopped["error"]
    assert stopped["final_model"] and stopped["step"] < 50_000_000


@pytest.mark.parametrize(
    "env_name, settings, expected",
    [
        ("cartpole", {"num_envs": -4}, "num_envs must be a positive integer, got -4"),
        ("NoSuchGame-v9", {}, "Unknown environment 'NoSuchGame-v9'"),
        ("cartpole", {"num_envs": 8, "num_steps": 16, "mini_batch_size": 100}, "must divide batch_size"),
        ("os:system", {}, "--allow-custom-envs"),
        ("cartpole", {"checkpoint.path": "/tmp/elsewhere"}, "checkpoint.path cannot be set"),
        ("cartpole", {"model_type": "qwen-7b"}, "language model"),
    ],
)
def test_bad_input_through_the_api_gives_the_reason(client, studio, env_name, settings, expected):
    before = sorted(path.name for path in studio.runs_dir.iterdir())
    with pytest.raises(Exception, match=expected.replace("(", r"\(").replace(")", r"\)")):
        client.predict(env_name, settings, api_name="/start")
    assert sorted(path.name for path in studio.runs_dir.iterdir()) == before, "a run folder was created"


def test_the_console_has_one_start_line_and_one_line_per_user_error(client, studio):
    with pytest.raises(Exception, match="no_such_console_key"):
        client.predict("cartpole", {"no_such_console_key": 1}, api_name="/start")
    deadline = time.time() + 10
    while "no_such_console_key" not in studio.log() and time.time() < deadline:
        time.sleep(0.2)
    log = studio.log()
    assert f"RL Studio is running on {studio.url}/" in log
    assert "share=True" not in log, "Gradio's public-link advice is not for a studio"
    lines = log.splitlines()
    refused = [number for number, line in enumerate(lines) if "no_such_console_key" in line]
    assert len(refused) == 1 and "API /start refused" in lines[refused[0]], log[-2000:]
    assert "Traceback" not in "\n".join(lines[refused[0] : refused[0] + 3])


@pytest.mark.parametrize("run_id", ["../../etc", "..", "a/b", "/etc/passwd"])
def test_run_ids_that_leave_the_runs_folder_are_rejected(client, run_id):
    with pytest.raises(Exception, match="run id|no run|valid"):
        client.predict(run_id, api_name="/poll")
    with pytest.raises(Exception, match="run id|no run|valid|There is no run"):
        client.predict(run_id, "config", api_name="/download")


def test_only_files_inside_the_runs_folder_are_served(studio, tmp_path):
    secret = studio.runs_dir.parent / "secret.txt"
    secret.write_text("not for the web")
    inside = studio.runs_dir / "some-run" / "note.txt"
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_text("fine")
    file_url = studio.url + "/gradio_api/file="
    assert http_status(file_url + "/etc/passwd") == 403
    assert http_status(file_url + str(secret)) == 403
    assert http_status(file_url + str(studio.runs_dir) + "/../secret.txt") == 403
    assert http_status(file_url + urllib.parse.quote(str(studio.runs_dir) + "/../secret.txt", safe="")) == 403
    assert http_status(file_url + str(Path(__file__).resolve())) == 403  # the working tree is not served
    assert http_status(file_url + str(inside)) == 200


def test_a_restarted_studio_lists_the_runs(finished_run, studio, tmp_path):
    restarted = start_studio(studio.runs_dir, tmp_path / "restarted.log")
    try:
        runs = Client(restarted.url, verbose=False).predict(api_name="/runs")
        by_id = {row["run"]: row for row in runs}
        row = by_id[finished_run["run_id"]]
        assert row["status"] == "finished" and row["env"] == "cartpole" and row["model"] == "ppo-small"
        assert row["steps"] == finished_run["step"]
        assert row["last return"] == pytest.approx(finished_run["last_return"], abs=0.01)
    finally:
        restarted.stop()


def test_listening_beyond_localhost_without_auth_warns(monkeypatch):
    import subprocess
    import sys

    import app
    from test_studio_helpers import REPO

    assert "without --auth" in app.exposure_warning("0.0.0.0", None)
    assert app.exposure_warning("0.0.0.0", ("alice", "secret")) is None
    assert app.exposure_warning("127.0.0.1", None) is None
    monkeypatch.setenv("RL_STUDIO_AUTH", "alice:secret")
    assert app.build_parser().parse_args([]).auth == ("alice", "secret")
    result = subprocess.run(
        [sys.executable, str(REPO / "app.py"), "--auth", "nopassword"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 2 and "--auth expects user:password" in result.stderr


def test_with_auth_nothing_is_served_before_logging_in(tmp_path):
    runs_dir = tmp_path / "runs"
    note = runs_dir / "some-run" / "config.yaml"
    note.parent.mkdir(parents=True)
    note.write_text("env_name: cartpole\n")
    server = start_studio(runs_dir, tmp_path / "auth.log", "--auth", "alice:secret")
    try:
        assert http_status(server.url + "/gradio_api/file=" + str(note)) in (401, 403)
        with pytest.raises(AuthenticationError, match="credentials were not provided"):
            Client(server.url, verbose=False).predict(api_name="/runs")
        rows = Client(server.url, auth=("alice", "secret"), verbose=False).predict(api_name="/runs")
        assert [row["run"] for row in rows] == ["some-run"]
    finally:
        server.stop()
