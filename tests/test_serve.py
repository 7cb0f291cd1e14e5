"""The policy server: it answers what the model would do, batches concurrent clients into one
forward pass, tells a client what was wrong with a bad request, and needs a key off loopback.
What any client can make it hold is bounded: body, connections, time, the event loop."""

import http.client
import json
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import gymnasium
import numpy as np
import psutil
import pytest
import torch
from fastapi.testclient import TestClient

from trainer.cluster.launch import free_port
from trainer.nets.build import build_policy
from trainer.nets.spec import make_policy_spec
from trainer.run.checkpoint import TrainedModel, atomic_save
from trainer.serving.http_limits import MAX_BODY_BYTES
from trainer.serving.serve import ServeError, create_app, start_server

ROOT = Path(__file__).resolve().parents[1]


def make_model(action_space=None, obs_size: int = 5, seed: int = 0) -> TrainedModel:
    action_space = gymnasium.spaces.Discrete(3) if action_space is None else action_space
    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (obs_size,)), action_space, norm_obs=True)
    torch.manual_seed(seed)
    policy = build_policy(spec)
    with torch.no_grad():  # a non-trivial normalisation, and logits far from uniform
        policy.obs_normalizer.mean.uniform_(-0.5, 0.5)
        policy.obs_normalizer.var.uniform_(0.2, 3.0)
        for parameter in policy.actor.parameters():
            parameter.mul_(30)
    policy.eval()
    return TrainedModel(
        policy,
        {"policy_spec": spec, "config": {"env_name": "toy", "algo": "ppo"}, "global_step": 1234},
        torch.device("cpu"),
    )


def post(url: str, payload, headers: dict | None = None) -> tuple[int, dict]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@pytest.fixture
def model():
    return make_model()


@pytest.fixture
def client(model):
    return TestClient(create_app(model, max_rows=64))


def test_act_answers_what_the_model_predicts(client, model):
    obs = np.random.default_rng(0).uniform(-1, 1, (20, 5)).astype(np.float32)
    response = client.post("/v1/act", json={"obs": obs.tolist(), "deterministic": True})
    assert response.status_code == 200
    expected = model.predict(obs, deterministic=True)[0]
    assert response.json()["actions"] == expected.tolist()
    assert len(set(expected.tolist())) > 1  # the test can tell a wrong row order from a right one
    one = client.post("/v1/act", json={"obs": obs[3].tolist()}).json()  # one observation, deterministic default
    assert one["actions"] == [int(expected[3])]
    sampled = client.post("/v1/act", json={"obs": obs.tolist(), "deterministic": False})
    assert sampled.status_code == 200 and all(action in (0, 1, 2) for action in sampled.json()["actions"])


def test_continuous_actions_come_back_as_vectors_within_the_bounds():
    model = make_model(gymnasium.spaces.Box(-2.0, 2.0, (2,)))
    obs = np.random.default_rng(1).uniform(-1, 1, (6, 5)).astype(np.float32)
    actions = TestClient(create_app(model)).post("/v1/act", json={"obs": obs.tolist()}).json()["actions"]
    np.testing.assert_allclose(actions, model.predict(obs)[0], rtol=1e-5, atol=1e-6)  # float32 rounding
    assert np.abs(actions).max() <= 2.0 and np.array(actions).shape == (6, 2)


def test_model_and_health_describe_the_policy(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    info = client.get("/v1/model").json()
    assert info["env_name"] == "toy" and info["global_step"] == 1234
    assert info["observation_space"]["shape"] == [5]
    assert info["action_space"] == {"kind": "discrete", "n": 3}


@pytest.mark.parametrize(
    "body, status, says",
    [
        (b"not json", 400, "not JSON"),
        (b"[1, 2]", 422, "not an object"),
        (b'{"observations": [1, 2, 3, 4, 5]}', 422, "unknown key(s) 'observations'"),
        (b'{"deterministic": true}', 422, "'obs' is missing"),
        (b'{"obs": [1, 2, 3]}', 422, "expected [5] (one observation) or [B, 5]"),
        (b'{"obs": [[1, 2, 3, 4, 5], [1, 2]]}', 422, "nested lists of equal length"),
        (b'{"obs": [1, 2, 1e39, 4, 5]}', 422, "NaN or infinity at index [0, 2]"),  # beyond float32
        (b'{"obs": [1, 2, 3, 4, 5], "deterministic": "yes"}', 422, "'deterministic' must be true or false"),
        (b'{"obs": [1, 2, true, 4, 5]}', 422, "'obs' must hold numbers only; found true"),
        (b'{"obs": [[1, 2, 3, 4, 5], ["1.5", 2, 3, 4, 5]]}', 422, "'obs' must hold numbers only; found \"1.5\""),
        (b'{"obs": [1, 2, null, 4, 5]}', 422, "'obs' must hold numbers only; found null"),
        (json.dumps({"obs": [[0.0] * 5] * 65}).encode(), 413, "at most 64 per request"),
    ],
)
def test_bad_requests_get_a_4xx_that_says_what_was_expected(client, body, status, says):
    response = client.post("/v1/act", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert says in response.json()["detail"]


def test_a_huge_body_is_refused_before_it_is_read(client):
    response = client.post(
        "/v1/act", content=b"{}", headers={"Content-Length": str(10**9), "Content-Type": "application/json"}
    )
    assert response.status_code == 413 and "at most" in response.json()["detail"]


def test_an_unexpected_error_is_a_500_without_its_traceback(model, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom in /secret/path")

    monkeypatch.setattr(model, "predict", broken)
    client = TestClient(create_app(model, batching=False), raise_server_exceptions=False)
    response = client.post("/v1/act", json={"obs": [0.0] * 5})
    assert response.status_code == 500 and response.json()["detail"].startswith("internal error")
    assert "boom" not in response.text and "Traceback" not in response.text


def test_a_public_address_needs_a_key_and_the_key_is_checked(model):
    with pytest.raises(ServeError, match="needs an API key: pass --api-key"):
        start_server(model, host="0.0.0.0")
    client = TestClient(create_app(model, api_key="s3cret"))
    body = {"obs": [0.0] * 5}
    assert client.post("/v1/act", json=body).status_code == 401
    assert "API key" in client.post("/v1/act", json=body, headers={"X-API-Key": "wrong"}).json()["detail"]
    assert client.post("/v1/act", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.post("/v1/act", json=body, headers={"X-API-Key": "s3cret"}).status_code == 200
    assert client.get("/v1/model").status_code == 401
    assert client.get("/healthz").status_code == 200


def test_concurrent_clients_share_forward_passes_and_each_gets_its_own_answer(model):
    # The batch window makes the grouping certain; without it requests group while a pass runs.
    server = start_server(model, max_wait_s=0.05)
    try:
        rng = np.random.default_rng(2)
        requests = [rng.uniform(-1, 1, (int(rng.integers(1, 4)), 5)).astype(np.float32) for _ in range(24)]
        answers: dict[int, list] = {}
        start = threading.Barrier(len(requests))

        def client(index: int) -> None:
            start.wait()
            answers[index] = post(server.url + "/v1/act", {"obs": requests[index].tolist()})

        threads = [threading.Thread(target=client, args=(index,)) for index in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for index, obs in enumerate(requests):
            status, body = answers[index]
            assert status == 200 and body["actions"] == model.predict(obs)[0].tolist()
        stats = server.app.state.stats
        assert stats.requests == len(requests)
        assert stats.forward_passes < len(requests) / 2 and stats.largest_batch > 3
    finally:
        server.stop()


def save_run(model: TrainedModel, run_dir: Path) -> Path:
    """`model` as a run folder's final model file, as a training run leaves it."""
    run_dir.mkdir(parents=True)
    atomic_save(
        {
            "format": "rl-studio",
            "format_version": 1,
            "kind": "model",
            "policy_spec": model.spec,
            "policy_state": model.policy.state_dict(),
            "config": model.config,
            "global_step": 1234,
        },
        run_dir / "toy_ppo_final.pth",
    )
    return run_dir


def test_cli_serves_a_run_folder_and_refuses_a_public_address_without_key(tmp_path, model):
    run_dir = save_run(model, tmp_path / "run")
    refused = subprocess.run(
        [sys.executable, "-m", "trainer", "serve", str(run_dir), "--host", "0.0.0.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RL_STUDIO_API_KEY": ""},
    )
    assert refused.returncode == 2 and "needs an API key" in refused.stderr
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", "serve", str(run_dir), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        obs = np.zeros((2, 5), dtype=np.float32)
        status, body = post(url + "/v1/act", {"obs": obs.tolist()})
        assert status == 200 and body["actions"] == model.predict(obs)[0].tolist()
        with urllib.request.urlopen(url + "/v1/model", timeout=5) as response:
            assert json.load(response)["source"] == "toy_ppo_final.pth"
    finally:
        process.terminate()
        process.wait(30)


def test_the_plain_http_example_plays_cartpole_through_the_server():
    model = make_model(gymnasium.spaces.Discrete(2), obs_size=4)
    server = start_server(model, api_key="k")
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / "http_client.py"),
                "--url",
                server.url,
                "--episodes",
                "2",
                "--api-key",
                "k",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "serving toy (ppo-small)" in done.stdout and "episode 2: return" in done.stdout
    assert server.app.state.stats.requests >= 2 * 8  # every step of both episodes asked the server


# ---------------------------------------------------------------------------------------------
# What any client can make the server hold is bounded (trainer/serving/http_limits.py)

HEADER_TIMEOUT_S = 2.0  # the child server's deadline for a request's headers (the default is 10 s)
FLOOD = 1100  # half-sent requests: more than a 1024-fd process can hold

CHILD_SERVER = """
import resource, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))  # a common default, below FLOOD
from trainer.serving.http_server import ServerLimits
from trainer.serving.serve import start_server
server = start_server(sys.argv[1], limits=ServerLimits(header_timeout_s=float(sys.argv[2])))
print(server.url, flush=True)
sys.stdin.read()  # serves until the test closes stdin
"""


class ChildServer:
    """A policy server in its own process: its memory measured alone, its fd limit 1024."""

    def __init__(self, run_dir: Path):
        self.log_path = run_dir.parent / "server.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", CHILD_SERVER, str(run_dir), str(HEADER_TIMEOUT_S)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://"), "the child server did not start"
        self.port = int(self.url.rsplit(":", 1)[1])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss(self) -> int:
        return psutil.Process(self.process.pid).memory_info().rss

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture(scope="module")
def child_server(tmp_path_factory):
    server = ChildServer(save_run(make_model(), tmp_path_factory.mktemp("child") / "run"))
    yield server
    server.stop()


def healthz(url: str, timeout: float = 5) -> tuple[float, float]:
    """(start, end) of a GET /healthz that answered ok."""
    start = time.perf_counter()
    with urllib.request.urlopen(url + "/healthz", timeout=timeout) as response:
        assert json.load(response) == {"status": "ok"}
    return start, time.perf_counter()


def read_until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes (TimeoutError if it does not)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_a_chunked_gigabyte_is_refused_at_the_limit_and_the_server_stays_small(child_server):
    healthz(child_server.url)
    before = peak = child_server.rss()
    megabyte = b"%x\r\n" % 2**20 + b"x" * 2**20 + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", child_server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/act HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )  # no Content-Length to refuse up front
        for chunk in (megabyte for _ in range(1024)):  # 1 GB, made as it is sent
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered
            try:
                sock.sendall(chunk)
            except OSError:
                break  # and closed
            sent += 1
            peak = max(peak, child_server.rss())
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert f"at most {MAX_BODY_BYTES}".encode() in answer
    assert sent < 100, f"the server read {sent} MB before refusing"
    assert peak - before < 100 * 2**20, f"the server grew by {(peak - before) / 2**20:.0f} MB"
    healthz(child_server.url)


def test_half_sent_requests_are_closed_at_the_header_deadline_while_healthz_answers(child_server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = FLOOD + 200
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"this test holds {FLOOD} sockets; the fd limit here is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    socks: list[socket.socket] = []
    try:
        start = time.perf_counter()
        for _ in range(FLOOD):
            sock = socket.create_connection(("127.0.0.1", child_server.port), timeout=10)
            sock.sendall(b"POST /v1/act HTTP/1.1\r\nHost: x\r\n")  # and nothing more
            socks.append(sock)
        healthz(child_server.url)  # during the flood: the connection cap made room
        answers = []
        for sock in socks:  # each closed by the server within the header deadline, or evicted before it
            sock.settimeout(max(0.01, start + HEADER_TIMEOUT_S + 10 - time.perf_counter()))
            try:
                answers.append(read_until_closed(sock)[:12])
            except TimeoutError:
                answers.append(b"still open")
        statuses = Counter(answers)
        assert set(statuses) <= {b"HTTP/1.1 408", b"HTTP/1.1 503"} and statuses[b"HTTP/1.1 408"], statuses
        assert "Too many open files" not in child_server.log()  # the cap kept it within its fds
    finally:
        for sock in socks:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    healthz(child_server.url)


def test_a_large_body_is_parsed_off_the_event_loop(child_server):
    body = json.dumps({"obs": [[0.123456789012345] * 5] * 140_000}).encode()  # valid JSON, 13.6 MB
    assert 10 * 2**20 < len(body) < MAX_BODY_BYTES
    probes, done = [], threading.Event()

    def probe():
        while not done.is_set():
            probes.append(healthz(child_server.url, timeout=60))

    thread = threading.Thread(target=probe)
    thread.start()
    connection = http.client.HTTPConnection("127.0.0.1", child_server.port, timeout=60)
    try:
        connection.request("POST", "/v1/act", body, {"Content-Type": "application/json"})
        sent = time.perf_counter()  # from here the server reads the rest and parses
        response = connection.getresponse()
        answered = time.perf_counter()
        answer = json.load(response)
    finally:
        done.set()
        thread.join(60)
        connection.close()
    assert response.status == 413 and "at most 4096 per request" in answer["detail"]  # it counted the rows
    window = answered - sent
    during = [end - start for start, end in probes if start < answered and end > sent]  # overlapping the parse
    assert len(during) >= 3 and max(during) < window / 2, (window, during)


def test_a_cross_origin_page_cannot_drive_the_server(model):
    server = start_server(model)

    def exchange(method: str, body: bytes | None, headers: dict) -> tuple[int, dict, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            connection.request(method, "/v1/act", body, {"Origin": "https://page.example", **headers})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    try:
        status, headers, _ = exchange(
            "OPTIONS", None, {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
        )
        assert status >= 400 and "access-control-allow-origin" not in headers  # the preflight fails
        obs = json.dumps({"obs": [0.0] * 5}).encode()
        for content_type, body in [
            ("text/plain", obs),
            ("application/x-www-form-urlencoded", b"obs=0"),
            (
                "multipart/form-data; boundary=x",
                b'--x\r\nContent-Disposition: form-data; name="obs"\r\n\r\n0\r\n--x--\r\n',
            ),
        ]:
            status, headers, answer = exchange("POST", body, {"Content-Type": content_type})  # no preflight
            assert status == 415 and b"Content-Type: application/json" in answer, answer
            assert "access-control-allow-origin" not in headers
        assert server.app.state.stats.requests == 0  # none reached the model
        status, headers, _ = exchange("POST", obs, {"Content-Type": "application/json"})
        assert status == 200 and "access-control-allow-origin" not in headers  # a page cannot read it
    finally:
        server.stop()


def test_a_port_in_use_is_said_before_serving(tmp_path, model):
    run_dir = save_run(model, tmp_path / "run")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "trainer", "serve", str(run_dir), "--port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{port} \\(Address already in use\\)"):
            start_server(model, port=port)
    assert result.returncode == 2, result.stderr
    assert f"error: cannot listen on 127.0.0.1:{port} (Address already in use); choose another --port" in result.stderr
    assert "serving" not in result.stdout + result.stderr
