"""The elastic cluster on one machine, with real agents and gloo ranks: the guide's cluster file;
master and worker as two agents on 127.0.0.1 (the connect line, a wrong token refused on both
sides); and, marked slow, kill -9 of a worker's rank mid-run, a late worker admitted, a lost
worker and the learning rate that follows the world size, and master / worker across two network
namespaces. Every process is bounded by a timeout and killed with its process group."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from trainer.cluster.admission import new_token
from trainer.cluster.launch import free_port
from trainer.cluster.nodes import parse_endpoint, split_cluster_file
from trainer.config.checks import ConfigError

ROOT = Path(__file__).resolve().parents[1]
GUIDE = {
    "master": {"host": "192.168.1.100", "port": 54321},
    "workers": [{"host": "192.168.1.101"}, {"host": "192.168.1.102"}],
    "communication": {"protocol": "grpc", "batch_size": 1024},
}
TINY = [
    "--set",
    "num_envs=8",
    "--set",
    "num_steps=16",
    "--set",
    "gif_interval=0",
    "--set",
    "device=cpu",
    "--set",
    "backend=gloo",
    "--set",
    "log_interval=1",
]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", "RL_STUDIO_TOKEN": ""}
PER_UPDATE = 8 * 16  # steps of one rank per update (TINY)


def test_the_guides_cluster_file_is_accepted_with_notes():
    train, cluster = split_cluster_file({"env_name": "cartpole", **GUIDE})
    assert train == {"env_name": "cartpole"}
    assert (cluster.host, cluster.port, cluster.workers) == ("192.168.1.100", 54321, ["192.168.1.101", "192.168.1.102"])
    assert any("communication.protocol" in note and "grpc" in note for note in cluster.notes)
    with pytest.raises(ConfigError, match="master.port"):
        split_cluster_file({"master": {"port": 70000}})
    assert parse_endpoint("10.0.0.1") == ("10.0.0.1", 54321)


class Agent:
    """`python -m trainer master|worker ...` in its own process group, its output in a file (so a
    test can wait for a line while it runs)."""

    def __init__(self, log: Path, args: list[str], prefix: list[str] = ()):
        self.log = log
        self.handle = open(log, "w")
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "trainer", *args],
            cwd=ROOT,
            env=ENV,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern, timeout: float):
        """Until the output matches `pattern` (a regular expression, or a test of the output)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = pattern(self.output()) if callable(pattern) else re.search(pattern, self.output())
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        self.kill()
        pytest.fail(f"{pattern!r} never appeared in {self.log.name}:\n{self.output()[-4000:]}")

    def finish(self, timeout: float) -> str:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.log.name}: still running after {timeout} s:\n{self.output()[-4000:]}")
        self.handle.close()
        return self.output()

    def kill(self) -> None:
        """SIGKILL to the agent and every rank it started (a machine that dies). The ranks run in
        sessions of their own (torch's elastic agent starts them so), hence the process tree."""
        import psutil

        try:
            family = [psutil.Process(self.process.pid)]
            family += family[0].children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        for member in family:
            try:
                member.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.process.wait()
        self.handle.close()


TOKEN = new_token()  # what the master prints when it makes one


def _master(tmp_path, port, *extra, timesteps=2048, token=TOKEN, host="127.0.0.1", prefix=()):
    config = tmp_path / "cluster.yaml"
    config.write_text("env_name: cartpole\nmaster:\n  host: 127.0.0.1\n  port: 1\ncommunication:\n  protocol: grpc\n")
    return Agent(
        tmp_path / "master.log",
        [
            "master",
            "--config",
            str(config),
            "--host",
            host,
            "--port",
            str(port),
            "--token",
            token,
            "--nproc",
            "1",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--set",
            f"total_timesteps={timesteps}",
            *TINY,
            *extra,
        ],
        prefix,
    )


def _worker(tmp_path, port, token=TOKEN, name="worker", host="127.0.0.1", prefix=()):
    return Agent(
        tmp_path / f"{name}.log", ["worker", "--master", f"{host}:{port}", "--token", token, "--nproc", "1"], prefix
    )


def _run_dir(tmp_path) -> Path:
    (run_dir,) = list((tmp_path / "runs").iterdir())
    return run_dir


def _metrics(run_dir: Path) -> list[dict]:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [event for event in events if event["type"] == "metrics"]


def _assert_one_step_each(steps: list[int], total: int) -> None:
    assert steps[-1] == total, steps[-5:]
    assert len(steps) == len(set(steps)) and steps == sorted(steps), "metrics.jsonl repeats a step"


def test_master_and_worker_finish_a_run_and_a_wrong_token_is_refused(tmp_path):
    port = free_port()
    master = _master(tmp_path, port, "--set", "min_nodes=2", "--set", "max_nodes=2")
    master.wait_for("Master listening", 120)
    intruder = _worker(tmp_path, port, token=new_token(), name="intruder")  # strong, but not this run's
    refused = intruder.finish(120)
    assert intruder.process.returncode == 2
    assert "refused by the master at" in refused and "wrong token" in refused and "--token" in refused
    worker = _worker(tmp_path, port)
    worker_output = worker.finish(240)
    output = master.finish(120)
    assert master.process.returncode == 0 and worker.process.returncode == 0, output[-3000:] + worker_output[-2000:]
    assert "note: communication.protocol: ranks talk through torch.distributed" in output
    assert "no TLS transport" in output and "no TLS transport" in worker_output  # said on both sides
    assert "Worker refused: 127.0.0.1 (wrong token)" in output
    assert "Worker connected: 127.0.0.1 (1 processes); 2 of 2..2 nodes" in output
    run_dir = _run_dir(tmp_path)
    assert [event["step"] for event in _metrics(run_dir)] == list(range(256, 2048 + 1, 256))  # 2 ranks x 128
    nodes = json.loads((run_dir / "nodes.json").read_text())
    assert len(nodes["nodes"]) == 2 and nodes["nodes"][0]["ranks"] == 1


def _ranks_of(agent: Agent) -> list[int]:
    children = subprocess.run(["pgrep", "-P", str(agent.process.pid)], capture_output=True, text=True).stdout.split()
    return [
        int(pid) for pid in children if "_rank" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    ]


def kill_figures(output: str, run_dir: Path) -> dict:
    """Kills survived, re-formations and steps redone, from the master's log and metrics.jsonl."""
    resumed = [int(step) for step in re.findall(r"resumed from \S+ at step (\d+)", (run_dir / "train.log").read_text())]
    reached = [int(step) for step in re.findall(r"Run failed at step (\d+)", output)]
    return {
        "re-formations": len(re.findall(r"Re-formed \(formation \d+\)", output)),
        "steps redone": sum(failed - back for failed, back in zip(reached, resumed)),
        "resumed at": resumed,
    }


@pytest.mark.slow
def test_a_killed_worker_rank_is_restarted_and_the_run_ends_at_total_timesteps(tmp_path):
    port, total = free_port(), 40_960
    master = _master(
        tmp_path,
        port,
        "--set",
        "min_nodes=2",
        "--set",
        "max_nodes=2",
        "--set",
        "checkpoint.interval=4",
        timesteps=total,
    )
    master.wait_for("Master listening", 120)
    worker = _worker(tmp_path, port)
    master.wait_for(r"Checkpoint at step", 240)  # the run has something to resume from
    ranks = _ranks_of(worker)
    assert len(ranks) == 1, ranks
    os.kill(ranks[0], signal.SIGKILL)
    output = master.finish(300)
    worker_output = worker.finish(60)
    assert master.process.returncode == 0 and worker.process.returncode == 0, output[-3000:] + worker_output[-2000:]
    run_dir = _run_dir(tmp_path)
    _assert_one_step_each([event["step"] for event in _metrics(run_dir)], total)
    figures = kill_figures(output, run_dir)
    print(f"kill -9 of 1 worker rank: {figures}")
    assert figures["re-formations"] == 1 and "resuming from the newest checkpoint" in output, output[-4000:]
    assert len(figures["resumed at"]) == 1
    assert 0 <= figures["steps redone"] <= 4 * 2 * PER_UPDATE  # at most one checkpoint interval
    assert worker_output.count("failed (exitcode") == 1, worker_output[-3000:]  # one restart, not two


@pytest.mark.slow
def test_a_late_worker_is_admitted_a_lost_one_logged_and_the_lr_follows_the_world(tmp_path):
    """min_nodes 1, max_nodes 2: the master trains alone, a worker that starts later joins at the
    next re-formation (world 2), then its machine dies (kill -9 of agent and ranks): 'Worker
    lost', the master re-forms alone and ends the run. The per-rank batch stays at 128 steps,
    and with lr_scaling sqrt the learning rate is x sqrt(2) while there are two ranks."""
    port, total = free_port(), 100_096
    master = _master(
        tmp_path,
        port,
        "--set",
        "min_nodes=1",
        "--set",
        "max_nodes=2",
        "--set",
        "lr_scaling=sqrt",
        "--set",
        "anneal_lr=false",
        "--set",
        "checkpoint.interval=2",
        timesteps=total,
    )
    master.wait_for(r"\[STEP \d+\]", 240)  # training alone
    worker = _worker(tmp_path, port)
    master.wait_for(r"Re-formed \(formation 2\): world 2 ranks", 240)
    master.wait_for(lambda output: output.split("Re-formed (formation 2)")[-1].count("[STEP ") >= 4, 120)
    worker.kill()
    master.wait_for("Worker lost: 127.0.0.1", 120)
    output = master.finish(400)
    assert master.process.returncode == 0, output[-4000:]
    assert output.count("Worker connected: 127.0.0.1 (1 processes)") == 2
    assert re.search(r"Re-formed \(formation 3\): world 1 ranks, resuming", output), output[-4000:]
    run_dir = _run_dir(tmp_path)
    metrics = _metrics(run_dir)
    steps = [event["step"] for event in metrics]
    _assert_one_step_each(steps, total)
    increments = [later - earlier for earlier, later in zip([0] + steps, steps)]
    assert set(increments) == {PER_UPDATE, 2 * PER_UPDATE}  # the per-rank batch stayed at 128
    by_world = {increment // PER_UPDATE: event["learning_rate"] for increment, event in zip(increments, metrics)}
    assert by_world[2] / by_world[1] == pytest.approx(2**0.5, rel=1e-6)
    logged = [
        int(samples)
        for samples in re.findall(
            r"lr_scaling sqrt: (\d+) samples per gradient step", (run_dir / "train.log").read_text()
        )
    ]
    assert logged == [logged[0], 2 * logged[0], logged[0]], logged  # said at every formation


def _netns_unavailable() -> str | None:
    if sys.platform != "linux" or shutil.which("ip") is None:
        return "needs Linux and iproute2's `ip`"
    if os.geteuid() != 0:
        return "ip netns needs root (CI runs as root)"
    probe = f"rlst-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns does not work here: {made.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture
def two_namespaces():
    """Two network namespaces joined by a veth pair, 10.231.x.1 and .2: addresses that exist only
    inside them, so master and worker can reach each other only over that link."""
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    names, links = [f"rlst-m-{tag}", f"rlst-w-{tag}"], [f"rlm{tag}", f"rlw{tag}"]
    subnet = f"10.231.{int(tag[:2], 16)}"
    commands = [
        ["ip", "netns", "add", names[0]],
        ["ip", "netns", "add", names[1]],
        ["ip", "link", "add", links[0], "type", "veth", "peer", "name", links[1]],
    ]
    for index in (0, 1):
        inside = ["ip", "netns", "exec", names[index], "ip"]
        commands += [
            ["ip", "link", "set", links[index], "netns", names[index]],
            inside + ["addr", "add", f"{subnet}.{index + 1}/24", "dev", links[index]],
            inside + ["link", "set", links[index], "up"],
            inside + ["link", "set", "lo", "up"],
        ]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True, text=True)
        yield [["ip", "netns", "exec", name] for name in names], [f"{subnet}.1", f"{subnet}.2"]
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.slow
def test_master_and_worker_across_two_network_namespaces(tmp_path, two_namespaces):
    (in_master, in_worker), (master_address, worker_address) = two_namespaces
    assert (
        subprocess.run(in_worker + ["ip", "-o", "addr"], capture_output=True, text=True).stdout.count(master_address)
        == 0
    )  # the master's address is not the worker's own
    port = 54321  # the guide's port: each namespace has its own ports
    master = _master(
        tmp_path, port, "--set", "min_nodes=2", "--set", "max_nodes=2", host=master_address, prefix=in_master
    )
    master.wait_for("Master listening", 120)
    worker = _worker(tmp_path, port, host=master_address, prefix=in_worker)
    worker_output = worker.finish(300)
    output = master.finish(120)
    assert master.process.returncode == 0 and worker.process.returncode == 0, output[-3000:] + worker_output[-2000:]
    assert f"Worker connected: {worker_address} (1 processes); 2 of 2..2 nodes" in output
    assert [event["step"] for event in _metrics(_run_dir(tmp_path))][-1] == 2048


def test_collectives_use_the_interface_that_reaches_the_master(monkeypatch):
    """gloo would otherwise advertise the address the host name resolves to (often 127.0.1.1):
    the launcher names the interface holding the node's address on the route to the master,
    unless the user already chose one."""
    import psutil

    from trainer.cluster.nodes import interface_of, pin_collectives_to

    loopback = next(
        name
        for name, addresses in psutil.net_if_addrs().items()
        if any(item.address == "127.0.0.1" for item in addresses)
    )
    assert interface_of("127.0.0.1") == loopback and interface_of("203.0.113.77") is None
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "chosen0")
    assert pin_collectives_to("127.0.0.1") == loopback
    assert os.environ["GLOO_SOCKET_IFNAME"] == loopback and os.environ["NCCL_SOCKET_IFNAME"] == "chosen0"
