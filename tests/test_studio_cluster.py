"""The studio's side of the elastic cluster (issue 11, item 5): the processes field, runs on
several ranks or accepting workers started through the CLI's launcher, the node panel, and CLI
cluster runs in the Runs tab.

The runs here are real (gloo ranks on this machine) and short: a few updates of CartPole."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio.cluster_view import nodes_html, run_nodes_html
from studio.form import FORM_FIELDS, form_values, raw_config_from_form, tuned_config, validated_config
from studio.runs import RunError, RunManager
from studio.views import runs_table_rows
from test_studio_helpers import REPO, free_port
from test_studio_runs import fake_endless_trainer, wait_for
from trainer.cluster.nodes import Node, NodeMonitor
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.run.layout import NODES_FILE

SHORT = {
    "env_name": "cartpole",
    "total_timesteps": 2048,
    "num_envs": 8,
    "num_steps": 64,
    "mini_batch_size": 128,
    "gif_interval": 0,
    "checkpoint": {"interval": 1},
    "log_interval": 1,
}
RUN_SECONDS = 300  # bound on one short multi-process run on a loaded 2-core machine (a hang fails, not speed)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def ended(manager: RunManager, run_id: str):
    wait_for(lambda: manager.active_count() == 0, timeout=RUN_SECONDS)
    return manager.get(run_id)


# ----------------------------------------------------------------------------- the node panel


def test_node_panel_shows_world_size_and_one_row_per_node_from_the_masters_nodes_json(tmp_path):
    now = time.time()
    monitor = NodeMonitor(None, "t", tmp_path, 1, 3, lambda line: None, "192.168.1.100:54321")
    monitor.nodes = {
        "a": Node("a", "192.168.1.100", "master-box", 2, now - 90, now),
        "b": Node("b", "192.168.1.101", "<script>x</script>", 1, now - 30, now),
        "c": Node("c", "192.168.1.102", "gone", 4, now - 600, now - 60, lost=True),
    }
    monitor.lines = [
        "13:00:00 Worker connected: 192.168.1.101 (1 processes); 2 of 1..3 nodes",
        "13:05:00 Worker lost: 192.168.1.102",
    ]
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"type": "metrics", "step": 10, "fps": 3000.0}) + "\n")
    monitor.write_table()  # the master's own writer: the panel reads what it really writes

    panel = run_nodes_html(str(tmp_path))
    assert "World size 3" in panel and "2 node(s) of 1..3" in panel and "192.168.1.100:54321" in panel
    rows = panel.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]
    assert len(rows) == 3
    assert "192.168.1.100 (master-box)" in rows[0] and "<td>2</td>" in rows[0] and "2,000" in rows[0]
    assert "1,000" in rows[1] and "(30 s ago)" in rows[1] and "connected" in rows[1]
    assert "lost" in rows[2]
    assert "<script>" not in panel and "&lt;script&gt;" in panel  # nodes.json is data: escaped
    assert "Worker lost: 192.168.1.102" in panel  # a CLI run's train.log has none of these lines
    assert "--token TOKEN" in panel  # accepts workers; the token itself is not there
    assert "--token s3cret" in nodes_html(
        json.loads((tmp_path / NODES_FILE).read_text()),
        "python -m trainer worker --master 192.168.1.100:54321 --token s3cret",
    )
    assert run_nodes_html(str(tmp_path / "missing")) == ""  # a one-process run: no panel


# ----------------------------------------------------------------------------- the processes field


def test_processes_field_comes_from_the_declaration_and_is_checked():
    fields = {form_field.key: form_field for form_field in FORM_FIELDS}
    for key in ("nproc_per_node", "min_nodes", "max_nodes", "max_restarts"):
        assert fields[key].kind == "int" and fields[key].group == "Processes and cluster"
    values = form_values(tuned_config("cartpole"))
    index = [form_field.key for form_field in FORM_FIELDS].index("nproc_per_node")
    assert values[index] == 1  # one process unless asked
    values[index] = 2
    assert validated_config(values, False).nproc_per_node == 2
    for bad in (0, -1, 5000, "two"):
        values[index] = bad
        with pytest.raises(ConfigError, match="nproc_per_node"):
            config_from_dict(raw_config_from_form(values))


# ----------------------------------------------------------------------------- runs that accept workers


def test_a_run_that_accepts_workers_gets_an_address_and_token_only_its_starter_sees(tmp_path):
    port = free_port()
    manager = RunManager(tmp_path, max_concurrent_runs=3, target=fake_endless_trainer, cluster_port=port)
    plain = manager.start({"env_name": "cartpole", "model_type": "ppo-small", "total_timesteps": 1000})
    assert manager.worker_join(plain.run_id) is None
    state = manager.start({"env_name": "cartpole", "model_type": "ppo-small", "total_timesteps": 1000, "max_nodes": 2})
    join = manager.worker_join(state.run_id)
    assert join.master == f"127.0.0.1:{port}"  # loopback unless the studio's owner says otherwise
    assert (
        len(join.token) >= 16
        and join.command == f"python -m trainer worker --master 127.0.0.1:{port} --token {join.token}"
    )
    assert join.token not in repr(manager.get(state.run_id)) and join.token not in repr(manager.list_runs())
    folders = set(tmp_path.iterdir())
    with pytest.raises(RunError, match="already accepts workers"):
        manager.start({"env_name": "cartpole", "model_type": "ppo-small", "total_timesteps": 1000, "max_nodes": 3})
    assert set(tmp_path.iterdir()) == folders  # refused before a run folder exists
    manager.shutdown()
    assert manager.worker_join(state.run_id) is None


def test_studio_run_with_two_processes_trains_two_gloo_ranks_through_the_launcher(tmp_path):
    """nproc_per_node 2 and max_nodes 2 (min 1): the master's two ranks train alone, and the run
    told its starter the worker command, never its log."""
    manager = RunManager(tmp_path, cluster_port=free_port())
    config = config_from_dict({**SHORT, "nproc_per_node": 2, "max_nodes": 2}).to_dict()
    state = manager.start(config)
    join = manager.worker_join(state.run_id)
    run = ended(manager, state.run_id)
    assert run.status == "finished", run.error_message
    run_dir = Path(run.run_dir)
    history = events(run_dir)
    start = next(event for event in history if event["type"] == "start")
    assert start["world_size"] == 2
    steps = [event["step"] for event in history if event["type"] == "metrics"]
    assert steps == sorted(set(steps)) and steps[-1] == run.step == 2048
    assert steps[0] == 2 * 8 * 64  # one update of 2 ranks x num_envs x num_steps
    nodes = json.loads((run_dir / NODES_FILE).read_text())
    assert nodes["world_size"] == 2 and [row["ranks"] for row in nodes["nodes"]] == [2] and nodes["finished"]
    log = (run_dir / "train.log").read_text()
    assert "Worker connected: 127.0.0.1 (2 processes); 1 of 1..2 nodes" in log  # the studio's log view tails it
    assert f"Master listening on {join.master}" in log and join.token not in log
    assert "World size 2" in run_nodes_html(run.run_dir)


def _wait_for_master_node(run_dir: Path) -> dict:
    wait_for(
        lambda: (run_dir / NODES_FILE).exists() and json.loads((run_dir / NODES_FILE).read_text())["nodes"],
        timeout=RUN_SECONDS,
    )
    return json.loads((run_dir / NODES_FILE).read_text())


@pytest.mark.slow
def test_studio_run_waiting_for_a_worker_is_joined_by_the_command_it_showed(tmp_path):
    manager = RunManager(tmp_path, cluster_port=free_port())
    state = manager.start(config_from_dict({**SHORT, "min_nodes": 2, "max_nodes": 2}).to_dict())
    join = manager.worker_join(state.run_id)
    assert "waiting for workers: 1 of 2" in nodes_html(_wait_for_master_node(Path(state.run_dir)))
    assert manager.get(state.run_id).status == "starting"
    worker = subprocess.Popen(
        [sys.executable, "-m", *join.command.split()[2:]],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        run = ended(manager, state.run_id)
        output = worker.communicate(timeout=RUN_SECONDS)[0]
    finally:
        worker.kill()
    assert run.status == "finished", (run.error_message, output)
    nodes = json.loads((Path(run.run_dir) / NODES_FILE).read_text())
    assert len(nodes["nodes"]) == 2 and "2 of 2..2 nodes" in (Path(run.run_dir) / "train.log").read_text()


@pytest.mark.slow
def test_studio_run_stopped_while_waiting_for_workers_ends_stopped(tmp_path):
    manager = RunManager(tmp_path, cluster_port=free_port())
    state = manager.start(config_from_dict({**SHORT, "min_nodes": 2, "max_nodes": 2}).to_dict())
    _wait_for_master_node(Path(state.run_dir))
    manager.stop(state.run_id)
    run = ended(manager, state.run_id)
    assert run.status == "stopped" and run.step == 0


@pytest.mark.slow
def test_studio_stop_of_a_two_process_run_saves_and_ends_stopped(tmp_path):
    manager = RunManager(tmp_path)
    state = manager.start(config_from_dict({**SHORT, "nproc_per_node": 2, "total_timesteps": 10_000_000}).to_dict())
    wait_for(lambda: manager.get(state.run_id).step > 0, timeout=RUN_SECONDS)
    manager.stop(state.run_id)
    run = ended(manager, state.run_id)
    assert run.status == "stopped" and run.final_model


# ----------------------------------------------------------------------------- CLI cluster runs


@pytest.mark.slow
def test_cli_run_on_two_processes_appears_in_the_runs_tab_like_any_other(tmp_path):
    settings = [
        "--set",
        "total_timesteps=2048",
        "--set",
        "num_envs=8",
        "--set",
        "num_steps=64",
        "--set",
        "mini_batch_size=128",
        "--set",
        "gif_interval=0",
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--config",
            "configs/cartpole.yaml",
            "--nproc",
            "2",
            "--runs-dir",
            str(tmp_path),
            "--quiet",
            *settings,
        ],
        cwd=REPO,
        check=True,
        timeout=RUN_SECONDS,
    )
    runs = RunManager(tmp_path).list_runs()
    assert len(runs) == 1 and runs[0].status == "finished" and runs[0].step == 2048
    row = runs_table_rows(runs)[0]
    assert runs[0].run_id in row and "finished" in row
    assert "World size 2" in run_nodes_html(runs[0].run_dir)


# ----------------------------------------------------------------------------- the page


def test_only_the_page_that_started_a_run_sees_its_worker_command(tmp_path):
    from studio.callbacks import Studio

    manager = RunManager(tmp_path, target=fake_endless_trainer, cluster_port=free_port())
    studio = Studio(manager)
    values = form_values(tuned_config("cartpole"))
    values[[form_field.key for form_field in FORM_FIELDS].index("max_nodes")] = 2
    message, run_id, _, starter = studio.on_start(*values)
    join = manager.worker_join(run_id)
    assert join.command in message and "--cluster-host" in message  # loopback: says how to open it
    run = manager.get(run_id)
    monitor = NodeMonitor(None, "run-id", Path(run.run_dir), 1, 2, lambda line: None, join.master)
    monitor.nodes = {"m": Node("m", "127.0.0.1", "here", 1, time.time(), time.time())}
    monitor.write_table()
    mine = studio.on_tick(run_id, starter)[-3]
    theirs = studio.on_tick(run_id, {})[-3]  # another tab opened on the same run
    assert mine.visible and join.command in mine.value and "World size 1" in mine.value
    assert theirs.visible and join.token not in theirs.value and "--token TOKEN" in theirs.value
    assert join.token not in repr(studio.api_runs()) and join.token not in repr(studio.api_poll(run_id))
    manager.shutdown()
