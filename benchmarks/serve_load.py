"""Load test of the policy server on 127.0.0.1: requests/s and p50 / p99 latency at 1, 8 and 64
concurrent clients, with batching and without (one forward pass per request).

    python benchmarks/serve_load.py runs/<run_id>            # a trained model (.pth or run folder)
    python benchmarks/serve_load.py --requests 2000 --seconds 20 --clients 1 8 64

Without a model it serves an untrained ppo-medium policy on Flappy Bird's observation and
action spaces (the forward pass is what costs; the weights do not matter). The server runs in
its own process (`python -m trainer serve`), the clients in this one, each on its own
keep-alive connection, sending one observation per request as a game would. Each level stops
after --requests requests or --seconds seconds, whichever comes first.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainer.cluster.launch import free_port  # noqa: E402  (after the path: the script runs from any folder)


def untrained_model(folder: Path) -> Path:
    import gymnasium
    import torch

    from trainer.nets.build import build_policy
    from trainer.nets.spec import make_policy_spec
    from trainer.run.checkpoint import atomic_save
    from trainer.run.layout import final_model_path

    config = {"env_name": "flappy_bird", "algo": "ppo"}
    spec = make_policy_spec("ppo-medium", gymnasium.spaces.Box(-2, 2, (8,)), gymnasium.spaces.Discrete(2))
    torch.manual_seed(0)
    return atomic_save(
        {
            "format": "rl-studio",
            "format_version": 1,
            "kind": "model",
            "policy_spec": spec,
            "policy_state": build_policy(spec).state_dict(),
            "config": config,
            "global_step": 0,
        },
        final_model_path(folder, config),
    )  # where a run keeps it


def start_server(model: Path, batching: bool) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [sys.executable, "-m", "trainer", "serve", str(model), "--port", str(port)]
    process = subprocess.Popen(
        command + ([] if batching else ["--no-batching"]), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return process, port
        except OSError:
            if process.poll() is not None:
                raise SystemExit(f"the server exited: {process.stderr.read().decode()}") from None
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the server did not answer /healthz within 120 s")


def model_obs_shape(port: int) -> list[int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/model", timeout=5) as response:
        return json.load(response)["observation_space"]["shape"]


def run_level(port: int, clients: int, max_requests: int, max_seconds: float, body: bytes) -> dict:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    sent = [0]
    deadline = time.monotonic() + max_seconds
    ready = threading.Barrier(clients + 1)

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        ready.wait()
        while time.monotonic() < deadline:
            with lock:
                if sent[0] >= max_requests:
                    break
                sent[0] += 1
            start = time.perf_counter()
            connection.request("POST", "/v1/act", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            mine.append(time.perf_counter() - start)
            if response.status != 200:
                errors[0] += 1
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    latencies.sort()
    quantile = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors[0],
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": quantile(0.50),
        "p99_ms": quantile(0.99),
        "mean_ms": statistics.fmean(latencies) * 1000,
    }


def forward_passes(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/model", timeout=5) as response:
        return json.load(response)["stats"]["forward_passes"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help=".pth or run folder (default: an untrained ppo-medium)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--requests", type=int, default=2000, help="at most this many requests per level")
    parser.add_argument("--seconds", type=float, default=15.0, help="at most this long per level")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the server's torch: one thread, as a game box would give it
    with tempfile.TemporaryDirectory() as folder:
        model = Path(args.model) if args.model else untrained_model(Path(folder))
        rows = []
        for batching in (True, False):
            process, port = start_server(model, batching)
            try:
                shape = model_obs_shape(port)
                body = json.dumps({"obs": np.full(shape, 0.1).tolist(), "deterministic": True}).encode()
                run_level(port, 1, 50, 5, body)  # warm-up
                for clients in args.clients:
                    before = forward_passes(port)
                    row = run_level(port, clients, args.requests, args.seconds, body)
                    row["requests_per_pass"] = row["requests"] / max(1, forward_passes(port) - before)
                    rows.append({"mode": "batched" if batching else "unbatched", **row})
                    print(
                        f"{rows[-1]['mode']:>9}  {clients:3d} clients  {row['requests_per_s']:8.0f} req/s  "
                        f"p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:7.2f} ms  "
                        f"{row['requests_per_pass']:5.1f} req/pass  ({row['requests']} requests, "
                        f"{row['errors']} errors)",
                        flush=True,
                    )
            finally:
                process.terminate()
                process.wait(30)
    print("\n| mode | clients | requests/s | p50 ms | p99 ms | requests per forward pass |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['mode']} | {row['clients']} | {row['requests_per_s']:.0f} | {row['p50_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['requests_per_pass']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
