"""The policy server: it answers what the model would do, batches concurrent clients into one
forward pass, tells a client what was wrong with a bad request, and needs a key off loopback."""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from trainer.checkpoint import TrainedModel, atomic_save
from trainer.models import build_policy, make_policy_spec
from trainer.serve import ServeError, create_app, start_server
from trainer.launch import free_port

ROOT = Path(__file__).resolve().parents[1]


def make_model(action_space=gymnasium.spaces.Discrete(3), obs_size: int = 5, seed: int = 0) -> TrainedModel:
    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (obs_size,)), action_space, norm_obs=True)
    torch.manual_seed(seed)
    policy = build_policy(spec)
    with torch.no_grad():  # a non-trivial normalisation, and logits far from uniform
        policy.obs_normalizer.mean.uniform_(-0.5, 0.5)
        policy.obs_normalizer.var.uniform_(0.2, 3.0)
        for parameter in policy.actor.parameters():
            parameter.mul_(30)
    policy.eval()
    return TrainedModel(policy, {"policy_spec": spec, "config": {"env_name": "toy", "algo": "ppo"},
                                 "global_step": 1234}, torch.device("cpu"))


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


@pytest.mark.parametrize("body, status, says", [
    (b"not json", 400, "not JSON"),
    (b"[1, 2]", 422, "not an object"),
    (b'{"observations": [1, 2, 3, 4, 5]}', 422, "unknown key(s) 'observations'"),
    (b'{"deterministic": true}', 422, "'obs' is missing"),
    (b'{"obs": [1, 2, 3]}', 422, "expected [5] (one observation) or [B, 5]"),
    (b'{"obs": [[1, 2, 3, 4, 5], [1, 2]]}', 422, "nested lists of equal length"),
    (b'{"obs": [1, 2, NaN, 4, 5]}', 422, "NaN or infinity at index [0, 2]"),
    (b'{"obs": [1, 2, 3, 4, 5], "deterministic": "yes"}', 422, "'deterministic' must be true or false"),
    (json.dumps({"obs": [[0.0] * 5] * 65}).encode(), 413, "at most 64 per request"),
])
def test_bad_requests_get_a_4xx_that_says_what_was_expected(client, body, status, says):
    response = client.post("/v1/act", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert says in response.json()["detail"]


def test_a_huge_body_is_refused_before_it_is_read(client):
    response = client.post("/v1/act", content=b"{}", headers={"Content-Length": str(10 ** 9)})
    assert response.status_code == 413 and "at most" in response.json()["detail"]


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


def test_cli_serves_a_run_folder_and_refuses_a_public_address_without_key(tmp_path, model):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = model.spec
    atomic_save({"format": "rl-studio", "format_version": 1, "kind": "model", "policy_spec": spec,
                 "policy_state": model.policy.state_dict(), "config": model.config, "global_step": 1234},
                run_dir / "toy_ppo_final.pth")
    refused = subprocess.run([sys.executable, "-m", "trainer", "serve", str(run_dir), "--host", "0.0.0.0"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "RL_STUDIO_API_KEY": ""})
    assert refused.returncode == 2 and "needs an API key" in refused.stderr
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trainer", "serve", str(run_dir), "--port", str(port)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "http_client.py"), "--url", server.url,
                               "--episodes", "2", "--api-key", "k"], capture_output=True, text=True, timeout=300)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "serving toy (ppo-small)" in done.stdout and "episode 2: return" in done.stdout
    assert server.app.state.stats.requests >= 2 * 8  # every step of both episodes asked the server
