"""The elastic cluster on one machine: the guide's cluster file, master and worker as two agents
on 127.0.0.1, a worker with the wrong token, kill -9 of a worker's rank mid-run."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.checks import ConfigError
from trainer.cluster import parse_endpoint, split_cluster_file

ROOT = Path(__file__).resolve().parents[1]
GUIDE = {"master": {"host": "192.168.1.100", "port": 54321},
         "workers": [{"host": "192.168.1.101"}, {"host": "192.168.1.102"}],
         "communication": {"protocol": "grpc", "batch_size": 1024}}
TINY = ["--set", "num_envs=8", "--set", "num_steps=16", "--set", "gif_interval=0", "--set", "device=cpu",
        "--set", "backend=gloo", "--set", "log_interval=1"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", "RL_STUDIO_TOKEN": ""}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_guides_cluster_file_is_accepted_with_notes():
    train, cluster = split_cluster_file({"env_name": "cartpole", **GUIDE})
    assert train == {"env_name": "cartpole"}
    assert (cluster.host, cluster.port, cluster.workers) == ("192.168.1.100", 54321, ["192.168.1.101", "192.168.1.102"])
    assert any("communication.protocol" in note and "grpc" in note for note in cluster.notes)
    with pytest.raises(ConfigError, match="master.port"):
        split_cluster_file({"master": {"port": 70000}})
    assert parse_endpoint("10.0.0.1") == ("10.0.0.1", 54321)


def _master(tmp_path, port, *extra, timesteps=2048, token="sesame"):
    config = tmp_path / "cluster.yaml"
    config.write_text("env_name: cartpole\nmaster:\n  host: 127.0.0.1\n  port: 1\ncommunication:\n  protocol: grpc\n")
    return subprocess.Popen([sys.executable, "-m", "trainer", "master", "--config", str(config), "--port", str(port),
                             "--token", token, "--nproc", "1", "--runs-dir", str(tmp_path / "runs"),
                             "--set", f"total_timesteps={timesteps}", *TINY, *extra],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _worker(port, token="sesame", nproc=1):
    return subprocess.Popen([sys.executable, "-m", "trainer", "worker", "--master", f"127.0.0.1:{port}",
                             "--token", token, "--nproc", str(nproc)],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=150) -> str:
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"timed out:\n{output[-3000:]}")
    return output


def _run_dir(tmp_path) -> Path:
    (run_dir,) = list((tmp_path / "runs").iterdir())
    return run_dir


def _metric_steps(run_dir: Path) -> list[int]:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [event["step"] for event in events if event["type"] == "metrics"]


def test_master_and_worker_finish_a_run_and_a_wrong_token_is_refused(tmp_path):
    port = free_port()
    master = _master(tmp_path, port, "--set", "min_nodes=2", "--set", "max_nodes=2")
    time.sleep(3)
    intruder = _worker(port, token="wrong")
    refused = _finish(intruder, timeout=90)
    assert intruder.returncode == 2
    assert "wrong token" in refused and "refused by the master" in refused
    worker = _worker(port)
    worker_output = _finish(worker)
    output = _finish(master)
    assert master.returncode == 0 and worker.returncode == 0, output[-3000:] + worker_output[-2000:]
    assert "note: communication.protocol: ranks talk through torch.distributed" in output
    assert "Worker refused: 127.0.0.1 (wrong token)" in output
    assert "Worker connected: 127.0.0.1 (1 processes); 2 of 2..2 nodes" in output
    run_dir = _run_dir(tmp_path)
    assert _metric_steps(run_dir) == list(range(256, 2048 + 1, 256))   # 2 ranks x 128 steps per update
    nodes = json.loads((run_dir / "nodes.json").read_text())
    assert len(nodes["nodes"]) == 2 and nodes["nodes"][0]["ranks"] == 1


@pytest.mark.slow
def test_a_killed_worker_rank_is_restarted_and_the_run_ends_at_total_timesteps(tmp_path):
    port = free_port()
    master = _master(tmp_path, port, "--set", "min_nodes=2", "--set", "max_nodes=2", "--set", "checkpoint.interval=4",
                     timesteps=40_960)
    time.sleep(3)
    worker = _worker(port)
    run_dir = None
    deadline = time.time() + 120
    while time.time() < deadline:   # wait until the run has a checkpoint, then kill the worker's rank
        runs = list((tmp_path / "runs").glob("*/checkpoints/ckpt_*.pth"))
        if runs:
            run_dir = runs[0].parents[1]
            break
        time.sleep(0.5)
    assert run_dir is not None, "no checkpoint appeared"
    children = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout.split()
    ranks = [pid for pid in children
             if "_rank" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
    assert ranks, children
    os.kill(int(ranks[0]), signal.SIGKILL)
    output = _finish(master, timeout=240)
    _finish(worker, timeout=60)
    assert master.returncode == 0, output[-3000:]
    steps = _metric_steps(run_dir)
    assert steps[-1] == 40_960 and len(steps) == len(set(steps)) and steps == sorted(steps)
    log = (run_dir / "train.log").read_text()
    assert "resumed from" in log and "restart 1 of 3" in output, output[-4000:]
