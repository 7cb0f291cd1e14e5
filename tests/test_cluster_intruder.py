"""An intruder with nothing but TCP access to the master's ports (and, worst case, the rendezvous id
sniffed from the wire) reads nothing of the run, joins nothing and runs no code, while an
admitted worker trains to the end. Everything on 127.0.0.1; the intruder's guesses come from
127.0.0.2 so that the throttle it earns does not lock out the worker on 127.0.0.1."""

import base64
import http.client
import json
import os
import pickle
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from torch.distributed import TCPStore

from test_cluster import ENV, ROOT, _master, _metrics, _ranks_of, _run_dir, _worker
from trainer.cluster.admission import mac
from trainer.cluster.launch import RANK_SETUP_ENV, free_port

TOTAL = 500 * 2 * 128  # 500 updates of 2 ranks x 128 steps: long enough for the attacks mid-run
OLD_KEYS = ["rl_studio/config", "rl_studio/run_dir", "rl_studio/run_id", "rl_studio/nonce", "rl_studio/master_proof"]


class Payload:
    """What an attacker plants: unpickling it creates `marker` (and would run any command)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _post(port: int, path: str, body: dict | bytes, source: str = "127.0.0.2") -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    text = answer.read().decode(errors="replace")
    connection.close()
    return answer.status, text


def _free_pair() -> int:
    """A port whose next one is free too (the gate and the store)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free ports in a row")


def _wait_until_overwritten(store: TCPStore, key: str, planted: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while store.get(key).decode() == planted:
        assert time.monotonic() < deadline, f"no admitted agent wrote over the planted {key} in {timeout:.0f} s"
        time.sleep(0.2)


def test_an_intruder_reads_nothing_joins_nothing_and_runs_nothing_while_a_worker_trains(tmp_path):
    port = _free_pair()
    planted, stock_ran = tmp_path / "planted-pickle-ran", tmp_path / "stock-torchrun-ran"
    master = _master(tmp_path, port, "--set", "min_nodes=2", "--set", "max_nodes=2", timesteps=TOTAL)
    master.wait_for("Master listening", 120)
    run_dir = _run_dir(tmp_path)

    # 1. The master's port: a challenge, and refusals; nothing of the run, and guesses are throttled.
    answers = []
    for attempt in range(6):
        status, text = _post(port, "/v1/challenge", {})
        challenge = json.loads(text)["challenge"]
        guess = f"guess-{attempt}-aaaaaaaaaaaaaaaaaaaa"
        answers.append(
            _post(
                port,
                "/v1/join",
                {
                    "challenge": challenge,
                    "nonce": "n",
                    "node": "evil",
                    "host": "x",
                    "hostname": "x",
                    "nproc": 1,
                    "proof": mac(guess, "join", challenge, "n", "evil"),
                },
            )
        )
    assert [status for status, _ in answers[:5]] == [403] * 5 and answers[5][0] == 429, answers
    assert "wrong token" in answers[0][1] and "try again in" in answers[5][1]
    seen = " ".join(text for _, text in answers)
    assert "cartpole" not in seen and str(run_dir) not in seen and "run_id" not in seen
    assert _post(port, "/v1/join", b"x" * 200_000)[0] == 413  # bounded body, not a crash

    # 2. The store's port: the old well-known keys are gone, and the old admission freeze does nothing.
    store = TCPStore("127.0.0.1", port + 1, is_master=False, timeout=timedelta(seconds=10))
    assert not any(store.check([key]) for key in OLD_KEYS)
    store.add("rl_studio/joins", 50)
    store.set("rl_studio/config", "env_name: subprocess:getoutput\n")

    # 3. The admitted worker joins and trains (the throttle earned on 127.0.0.2 does not touch it).
    worker = _worker(tmp_path, port)
    master.wait_for(r"\[STEP \d+\]", 240)

    # 4. Worst case: the rendezvous id sniffed from the wire (here: read from a rank's environment).
    (rank,) = _ranks_of(master)
    environ = Path(f"/proc/{rank}/environ").read_bytes().split(b"\0")
    setup = json.loads(
        next(item for item in environ if item.startswith(RANK_SETUP_ENV.encode() + b"=")).split(b"=", 1)[1]
    )
    run_id = setup["run_id"]
    planted_value = base64.b64encode(pickle.dumps(Payload(planted))).decode()
    store.set(f"torch.rendezvous.{run_id}", planted_value)
    # Whichever agent syncs first (the master's or the worker's) refuses it, says so in its own
    # output, and writes the last good state back over it: the other may never see it.
    refused = "refused: the rendezvous state was written by a node that was not admitted"
    master.wait_for(lambda output: refused in output or refused in worker.output(), 120)
    # ... and the next keep-alive of an admitted agent writes a signed state over the planted one.
    # (Until then, a stock torchrun would unpickle the plant in its own process: the attacker's
    # code in the attacker's process, which proves nothing about ours.)
    _wait_until_overwritten(store, f"torch.rendezvous.{run_id}", planted_value, 60)
    script = tmp_path / "evil.py"
    script.write_text(f"open({str(stock_ran)!r}, 'w').write('joined')\n")
    stock = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1:2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{port + 1}",
            "--rdzv-id",
            run_id,
            "--max-restarts",
            "0",
            str(script),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stock.returncode != 0, stock.stdout[-2000:] + stock.stderr[-2000:]

    output = master.finish(300)
    worker_output = worker.finish(60)
    assert master.process.returncode == 0 and worker.process.returncode == 0, output[-3000:] + worker_output[-2000:]
    assert not planted.exists() and not stock_ran.exists()
    assert output.count("Worker refused: 127.0.0.2 (wrong token)") == 5
    assert "world: 2 ranks" in output and "Re-formed" not in output  # the intruder never became a rank
    steps = [event["step"] for event in _metrics(run_dir)]
    assert steps[-1] == TOTAL and len(steps) == len(set(steps))
    assert "custom code (module:Class envs, wrappers) not allowed on this machine" in worker_output
